"""``thinkgate bench stream-gaps``: the gaps between streamed tokens, with vLLM's engine
ring rechecked every 20 ms (the old setting) and every 2 ms (thinkgate's CPU default).

With a short engine spin (``engines.local.engine_wait``) a sleeping reader of vLLM's
shared-memory ring relies on a notification that is sometimes dropped; it then finds
the step only at its next recheck. Per pair (``--pairs``, alternating order), one
``thinkgate serve --executor mp`` (the worker process whose ring it is) per setting
(``THINKGATE_ENGINE_RECHECK_MS``), one warm-up, then
``--prompts`` streamed ``/v1/completions`` of ``--output-len`` tokens (``ignore_eos``,
greedy, 32-token prompts) arriving at ``--rate`` a second; every inter-chunk gap is
timed on the client (chunks carry their token count: ``continuous_usage_stats``).

Reported per setting (median over pairs) and as paired ratios 2 ms / 20 ms: gap p50,
p90, p99, max, the share of gaps over 15 ms, and the cores the engine processes use
while the server idles (10 s before the load). Writes
``benchmarks/results/stream_gaps/stream-gaps.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx

import testbed
from benchmarks.out_paths import LOGS, results_of
from benchmarks.overhead import SLOW_GAP_S
from benchmarks.servers import ServerUrl, machine, thinkgate
from engines.local import engine_wait

RESULTS = results_of("stream_gaps")
SETTINGS = (20, 2)  # recheck ms: before, now
FIGURES = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "over_15ms_pct", "idle_engine_cpu_share")
IDLE_S = 10.0  # an idle server watched this long before the load


async def _stream_all(url: str, model: str, args: argparse.Namespace) -> list[float]:
    """Every inter-chunk gap (ms) of ``args.prompts`` streams arriving at ``args.rate``/s."""
    rng = random.Random(0)
    vocab = 60  # the testbed's small vocabulary: ids 5-59 are plain characters
    prompts = [[rng.randrange(5, vocab) for _ in range(32)] for _ in range(args.prompts)]

    async def one(client: httpx.AsyncClient, i: int, prompt: list[int]) -> list[float]:
        await asyncio.sleep(i / args.rate)
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": args.output_len,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        times: list[float] = []
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data: {") and '"choices":[]' not in line:
                    times.append(time.perf_counter())
        return [(b - a) * 1e3 for a, b in zip(times, times[1:], strict=False)]

    limits = httpx.Limits(max_connections=args.prompts + 8)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(one(client, 0, prompts[0]) for _ in range(4)))  # warm-up
        per = await asyncio.gather(*(one(client, i, p) for i, p in enumerate(prompts)))
    return [g for gaps in per for g in gaps]


def _figures(gaps: Sequence[float]) -> dict[str, float]:
    ordered = sorted(gaps)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {
        "p50_ms": q(0.50),
        "p90_ms": q(0.90),
        "p99_ms": q(0.99),
        "max_ms": ordered[-1],
        "over_15ms_pct": 100.0 * sum(g > SLOW_GAP_S * 1e3 for g in ordered) / len(ordered),
        "gaps": float(len(ordered)),
    }


def _idle_engine_cpu_share(url: ServerUrl) -> float:
    """Cores the server's engine processes (its children) use while nothing is asked:
    what a shorter recheck costs an idle server."""
    import psutil

    children = psutil.Process(url.pid).children(recursive=True)

    def cpu() -> float:
        return sum(float(sum(c.cpu_times()[:2])) for c in children)

    before = cpu()
    time.sleep(IDLE_S)
    return (cpu() - before) / IDLE_S


def run(args: argparse.Namespace) -> dict[int, list[dict[str, float]]]:
    from tqdm import tqdm

    model = str(testbed.model_path("base"))
    os.environ[engine_wait.ENV] = "1"
    runs: dict[int, list[dict[str, float]]] = {s: [] for s in SETTINGS}
    total = args.pairs * len(SETTINGS)
    bar = tqdm(total=total, desc="pairs x rechecks", unit="run", file=sys.stderr)
    for pair in range(args.pairs):
        for recheck in SETTINGS if pair % 2 == 0 else SETTINGS[::-1]:
            os.environ[engine_wait.RECHECK_ENV] = str(recheck)
            log = LOGS / f"stream-gaps-{recheck}.log"
            # The recheck is that of the core-worker ring: only ``--executor mp`` has one.
            flags = ("--reward-model", "none", "--served-model-name", model, "--executor", "mp")
            with thinkgate(model, *flags, log=log) as url:
                idle = _idle_engine_cpu_share(url)
                got = _figures(asyncio.run(_stream_all(url, model, args)))
            got["idle_engine_cpu_share"] = idle
            runs[recheck].append(got)
            print(f"[stream-gaps] pair {pair + 1} recheck {recheck} ms: {json.dumps(got)}")
            bar.update(1)
    bar.close()
    return runs


def _report(runs: dict[int, list[dict[str, float]]], command: str) -> str:
    before, now = SETTINGS
    lines = [
        "# Streamed token gaps: vLLM's engine ring rechecked every 20 ms vs 2 ms",
        "",
        f"`{command}` on {machine()}. thinkgate serve (testbed base, 1 ms engine spin), "
        "gaps between streamed chunks timed on the client; medians over pairs, paired "
        "ratios 2 ms / 20 ms (median, min-max).",
        "",
        f"| figure | recheck {before} ms | recheck {now} ms | ratio |",
        "|---|---:|---:|---:|",
    ]
    for f in FIGURES:
        a = [r[f] for r in runs[before]]
        b = [r[f] for r in runs[now]]
        ratios = [y / x for x, y in zip(a, b, strict=True) if x]
        cell = (
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            if ratios
            else "-"
        )
        lines.append(f"| {f} | {statistics.median(a):.2f} | {statistics.median(b):.2f} | {cell} |")
    lines += [
        "",
        "A gap over 15 ms is a step the engine found late: its worker's wake-up was "
        "dropped and the sleeping reader saw the step only at its next recheck.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench stream-gaps", description=__doc__)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--rate", type=float, default=15.0, help="streams started per second")
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args(list(argv) if argv is not None else None)
    command = "thinkgate bench stream-gaps " + " ".join(sys.argv[1:] if argv is None else argv)
    runs = run(args)
    text = _report(runs, command.strip())
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "stream-gaps.md").write_text(text)
    meta: dict[str, Any] = {"command": command.strip(), "machine": machine(), "args": vars(args)}
    (RESULTS / "stream-gaps.json").write_text(
        json.dumps({"runs": {str(k): v for k, v in runs.items()}, "_meta": meta}, indent=1)
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
