"""``thinkgate bench processors-idle``: what thinkgate's logits processors cost the engine
when no request uses them, without HTTP in the way.

Two engines in one process, each built exactly as ``thinkgate serve`` builds its local
engine (:meth:`engines.local.engine.LocalEngine.start`): A with no logits processors,
B with the default ones (confidence, elastic, guidance with its wrapper model). Both
are driven through the ``Engine`` protocol (``stream``) by the same seeded Poisson
arrivals, in turn (A B, B A, ...), with plain requests that opt into nothing: random
prompts, fixed length, ``ignore_eos``. Reported per metric: each side's median over its
runs and the paired ratio B / A (median, IQR, min-max, pairs where B measured more).

Why: ``bench overhead`` and ``bench interleaved`` compare whole servers through vLLM's
client, where a pair's ratio swings 0.6-1.8x on 2 cores; this isolates the engine's
share (vLLM's per-step calls into each processor, the wrapper's hidden-state hand-off)
so a gap between ``thinkgate`` and ``thinkgate-bare`` there can be told apart from it.

    .venv/bin/python -m benchmarks.cli processors-idle [--pairs 10] [--rate 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from benchmarks.interleaved import add_run_shape, ratio_table
from benchmarks.out_paths import results_of
from benchmarks.overhead import METRICS, SLOW_GAPS, key
from benchmarks.overhead_engine import random_prompts, run_rate, timed
from benchmarks.servers import machine, worker_binding
from core.engine import Engine, GenerateRequest, SamplingConfig
from engines.local import engine_wait
from kernels.processors import DEFAULT
from loadtests.report import git_sha

RESULTS = results_of("processors_idle")
SHOWN = (*METRICS, SLOW_GAPS)


async def _counts(engine: Engine, prompt: list[int], output_len: int) -> AsyncIterator[int]:
    request = GenerateRequest(
        request_id=uuid.uuid4().hex,
        prompt_token_ids=tuple(prompt),
        sampling=SamplingConfig(max_tokens=output_len, ignore_eos=True),
    )
    async for delta in engine.stream(request):
        yield len(delta.token_ids)


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm
    from transformers import AutoConfig

    from engines.local.engine import LocalEngine
    from server.settings import Settings

    sides: dict[str, tuple[str, ...]] = {"a": (), "b": DEFAULT}
    settings = {s: Settings(logits_processors=p) for s, p in sides.items()}
    engines: dict[str, LocalEngine] = {}
    try:
        for side in sides:  # one by one: a failed start still closes the one before
            engines[side] = LocalEngine.start(settings[side])
        vocab = AutoConfig.from_pretrained(settings["a"].model_path).vocab_size
        prompts = random_prompts(vocab, args.prompts, args.input_len)

        def driver(engine: Engine) -> Callable[[list[int]], Coroutine[Any, Any, dict[str, Any]]]:
            def one(prompt: list[int]) -> Coroutine[Any, Any, dict[str, Any]]:
                return timed(_counts(engine, prompt, args.output_len))

            return one

        drivers = {s: driver(e) for s, e in engines.items()}
        for one in drivers.values():  # warm-up: the CPU kernels build on first use
            await run_rate(one, prompts, float("inf"))
        runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
        started = time.monotonic()
        bar = tqdm(total=args.pairs, desc="pairs", unit="pair", file=sys.stderr)
        for i in range(args.pairs):
            for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                runs[side].append(await run_rate(drivers[side], prompts, args.rate))
            a, b = runs["a"][-1], runs["b"][-1]
            print(
                f"[processors-idle] pair {i + 1}/{args.pairs}: p99 ITL {a['p99_itl_ms']:.2f} / "
                f"{b['p99_itl_ms']:.2f} ms, p50 TPOT {a['median_tpot_ms']:.2f} / "
                f"{b['median_tpot_ms']:.2f} ms",
                file=sys.stderr,
                flush=True,
            )
            bar.update(1)
        bar.close()
        return {
            "a": sorted(engines["a"].processors),
            "b": sorted(engines["b"].processors),
            "runs": runs,
            "seconds": time.monotonic() - started,
        }
    finally:
        for engine in engines.values():
            await engine.aclose()


def report(result: dict[str, Any], command: str) -> str:
    args = result["args"]
    b = ", ".join(result["b"]) or "none"
    return (
        "\n".join(
            [
                f"# Logits processors loaded, none used: engine alone at request rate "
                f"{key(args['rate'])}",
                "",
                f"`{command}` on {result['machine']}, {result['binding']}, at commit "
                f"{result['git']}; two engines in one process built as `thinkgate serve` builds "
                f"its own (A: no processors; B: {b}), driven in turn through the Engine "
                f"protocol (no HTTP) by the same Poisson arrivals: {args['prompts']} plain "
                f"requests per run, {args['input_len']} tokens in / {args['output_len']} out, "
                f"`ignore_eos`; {args['pairs']} pairs in alternating order, "
                f"{result['seconds']:.0f} s.",
                "",
                *ratio_table("none", "default", result["runs"]["a"], result["runs"]["b"], SHOWN),
                "",
                "Ratios above 1: B measured more (slower for latencies, faster for throughputs). "
                "A difference the processors make shows as ratios away from 1 in most pairs; "
                "compare the spread with `bench interleaved`'s A/A run.",
            ]
        )
        + "\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench processors-idle", description=__doc__)
    add_run_shape(parser, rate=30.0)
    args = parser.parse_args(list(argv) if argv is not None else None)
    command = "thinkgate bench processors-idle " + " ".join(sys.argv[1:] if argv is None else argv)
    engine_wait.export(None)  # as the server does: the engines wait alike, as it has them
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # as bench overhead's servers get
    result = asyncio.run(_measure(args))
    result |= {
        "machine": machine(),
        "binding": worker_binding(),
        "git": git_sha(),
        "args": dict(vars(args)),
    }
    text = report(result, command.strip())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "processors-idle.json").write_text(json.dumps(result, indent=2))
    (RESULTS / "processors-idle.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
