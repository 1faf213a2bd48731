"""Scale-out: the gateway hop's cost, and one replica versus two (``thinkgate bench remote``).

Same model (testbed ``base``), same load, one run. Configurations:

  local        thinkgate serve, engine in process              all on core 0
  remote-1     gateway --engine remote -> 1 replica            all on core 0
  remote-1/2c  gateway (both cores) -> 1 replica (core 0)
  remote-2/2c  gateway (both cores) -> 2 replicas (cores 0, 1)

``local`` vs ``remote-1`` is the cost of the HTTP hop on the same single core (the
gateway's JSON and SSE work now competes with the engine for it). ``remote-1/2c`` vs
``remote-2/2c`` is what a second replica buys: on this 2-core machine each replica is
pinned to one core (``taskset``), so one replica cannot use the second core and two
replicas get one each; the gateway floats over both cores in both. Replicas are
started by ``thinkgate replica``; gateways pick their own defaults (no reward model).

Load: ``--requests`` chat requests (strategy ``plain``, ``n`` samples each, fixed
length with ``ignore_eos``), ``--concurrency`` in flight, through the OpenAI SDK. The
configurations take turns for ``--rounds`` rounds so that drift in the machine's load
hits them alike. Reported: completion tokens/s, request latency p50/p95, and ratios.
Writes ``benchmarks/results/remote/remote.md`` (+ ``remote.json``, ``remote.png``).

    .venv/bin/python -m benchmarks.remote [--rounds 3] [--requests 48] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from typing import Any

from tqdm import tqdm

from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import free_port, machine, serve

RESULTS = results_of("remote")
CONFIGS = ("local", "remote-1", "remote-1/2c", "remote-2/2c")


@dataclass(frozen=True, slots=True)
class _Trial:
    config: str
    round: int
    wall_s: float
    completion_tokens: int
    latencies_s: tuple[float, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s


def pinned(cores: str | None, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", cores, *cmd] if cores else cmd


@contextmanager
def _replica(cores: str, tag: str) -> Iterator[str]:
    port = free_port()
    # The same number of sequences per engine as the local gateway's default
    # (--max-num-seqs 64), so that local vs remote-1 compares like with like.
    cmd = [sys.executable, "-m", "server.cli", "replica", "--port", str(port)]
    cmd += ["--max-num-seqs", "64"]
    log = LOGS / f"remote-replica-{tag}.log"
    with serve(pinned(cores, cmd), ready_path="/health", log=log, port=port) as url:
        yield url


@contextmanager
def gateway(cores: str | None, tag: str, *flags: str) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(port), *flags]
    cmd += ["--reward-model", "none", "--log-level", "warning"]
    log = LOGS / f"remote-gateway-{tag}.log"
    with serve(pinned(cores, cmd), ready_path="/ready", log=log, port=port) as url:
        yield url


async def _run_load(url: str, requests: int, concurrency: int, n: int, max_tokens: int) -> _Trial:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    tokens = 0

    async def one(i: int) -> None:
        nonlocal tokens
        async with gate:
            t0 = time.perf_counter()
            reply = await client.chat.completions.create(
                model="testbed-base",
                messages=[
                    {"role": "user", "content": f"Compute {i % 10}+{(7 * i) % 10}-4 mod 10."}
                ],
                n=n,
                temperature=1.0,
                max_tokens=max_tokens,
                extra_body={"ignore_eos": True},
                extra_headers={"X-Strategy": "plain"},
            )
            latencies.append(time.perf_counter() - t0)
            assert reply.usage is not None
            tokens += reply.usage.completion_tokens

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    wall = time.perf_counter() - start
    await client.close()
    return _Trial("", 0, wall, tokens, tuple(latencies))


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if "--router" in given:  # thinkgate bench remote --router: behind vLLM's router
        from benchmarks import router

        return router.main([a for a in given if a != "--router"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument(
        "--out", default="remote", help="results name under benchmarks/results/remote"
    )
    args = parser.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    trials: list[_Trial] = []

    def measure(config: str, url: str, rnd: int) -> None:
        t = asyncio.run(_run_load(url, args.requests, args.concurrency, args.n, args.max_tokens))
        trials.append(_Trial(config, rnd, t.wall_s, t.completion_tokens, t.latencies_s))

    bar = tqdm(total=args.rounds * len(CONFIGS), desc="remote bench", unit="trial")
    with ExitStack() as stack:
        # The local gateway holds its own engine on core 0: measure it first, then stop
        # it so that its engine does not sit beside the replicas.
        local = stack.enter_context(gateway("0", "local"))
        for rnd in range(args.rounds):
            measure("local", local, rnd)
            bar.update()
        stack.close()
        a = stack.enter_context(_replica("0", "a"))
        b = stack.enter_context(_replica("1", "b"))
        remote = "--engine", "remote", "--health-interval-s", "5"
        urls = {
            "remote-1": stack.enter_context(gateway("0", "1", *remote, "--vllm-urls", a)),
            "remote-1/2c": stack.enter_context(gateway(None, "1-2c", *remote, "--vllm-urls", a)),
            "remote-2/2c": stack.enter_context(
                gateway(None, "2-2c", *remote, "--vllm-urls", f"{a},{b}")
            ),
        }
        for rnd in range(args.rounds):
            for config, url in urls.items():
                measure(config, url, rnd)
                bar.update()
    bar.close()
    _report(trials, args)
    return 0


def _report(trials: list[_Trial], args: argparse.Namespace) -> None:
    def tps(config: str) -> float:
        return statistics.median(t.tokens_per_s for t in trials if t.config == config)

    rows = []
    for config in CONFIGS:
        mine = [t for t in trials if t.config == config]
        lat = [x for t in mine for x in t.latencies_s]
        rows.append(
            {
                "config": config,
                "tokens_per_s": tps(config),
                "p50_s": statistics.median(lat),
                "p95_s": pct(lat, 0.95),
                "runs": [round(t.tokens_per_s, 1) for t in mine],
            }
        )
    hop = tps("remote-1") / tps("local")
    scale = tps("remote-2/2c") / tps("remote-1/2c")
    command = "python -m benchmarks.remote " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
    )
    lines = [
        "# Scale-out: gateway hop and replicas",
        "",
        f"Machine: {machine()}; no GPU; vLLM 0.32 CPU; testbed `base`. Command: `{command}`.",
        f"Load: {args.requests} chat requests (`plain`, n={args.n}, {args.max_tokens} tokens "
        f"each with `ignore_eos`), {args.concurrency} in flight, {args.rounds} rounds; medians.",
        "",
        "| config | completion tokens/s | p50 latency (s) | p95 latency (s) | runs (tok/s) |",
        "|---|---|---|---|---|",
        *(
            f"| {r['config']} | {r['tokens_per_s']:.0f} | {r['p50_s']:.2f} | {r['p95_s']:.2f} "
            f"| {r['runs']} |"
            for r in rows
        ),
        "",
        f"- Gateway hop on one core, remote-1 / local throughput: **{hop:.2f}x**.",
        f"- Two replicas / one replica (one core each, gateway on both): **{scale:.2f}x**.",
        "",
        "Pinning: `local` and `remote-1` run every process on core 0 (`taskset -c 0`);",
        "in `remote-1/2c` and `remote-2/2c` each replica is pinned to one core and the",
        "gateway floats, so the second replica's core is the only difference.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    (RESULTS / f"{args.out}.md").write_text(text)
    (RESULTS / f"{args.out}.json").write_text(
        json.dumps({"rows": rows, "trials": [asdict(t) for t in trials]}, indent=1)
    )
    _plot(rows, args.out)


def _plot(rows: list[dict[str, Any]], name: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the plot is a convenience; the table is the result
        return
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar([r["config"] for r in rows], [r["tokens_per_s"] for r in rows], color="#4a7ab0")
    ax.set_ylabel("completion tokens/s")
    ax.set_title("thinkgate scale-out (2-core CPU, testbed model)")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
