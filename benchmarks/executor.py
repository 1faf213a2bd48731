"""``thinkgate bench executor``: the model in vLLM's engine core against a worker process, on CPU.

The gateway (``thinkgate serve`` defaults: the testbed ``base`` with its reward model and
PRM in process) is started alternately with ``--executor mp`` (vLLM's CPU default: each
engine's model in a worker process of its own, every step handed over through a
shared-memory ring) and ``--executor uni`` (thinkgate's CPU default, ``auto`` there: the
model inside the engine core), pairs A B A B. Each server gets the same load, in order:

* ``alone``: plain 64-token answers (``ignore_eos``), one at a time;
* ``loaded``: 64-token answers from ``--concurrency`` clients at once (wall time of the batch
  and the engine processes' CPU per second of it);
* ``deepconf x1`` / ``deepconf x4``: DeepConf@16 on held-out testbed questions (test split,
  9-12 operations, temperature 1) from 1 and 4 clients;
* ``pf x4``: particle filtering with 4 particles (the PRM in process) from 4 clients.

Reported per run, then the paired ratios (uni / mp), median and range: below 1 is faster
for latencies and wall times, above 1 for questions per second.

Writes ``benchmarks/results/executor/executor.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx

from benchmarks.engine_wait import engine_cpu_s
from benchmarks.out_paths import results_of
from benchmarks.paired import ratio_rows, run_rows, save
from benchmarks.reliability import body, pct, running
from benchmarks.servers import machine
from testbed.task import make_questions

RESULTS = results_of("executor")
MD_PATH = RESULTS / "executor.md"
JSON_PATH = RESULTS / "executor.json"
CHOICES = ("mp", "uni")
LOWER_IS_BETTER = (
    "alone_p50_s",
    "loaded_wall_s",
    "loaded_p99_s",
    "deepconf_x1_p50_s",
    "deepconf_x4_p50_s",
    "pf_x4_p50_s",
)
HIGHER_IS_BETTER = ("deepconf_x1_qps", "deepconf_x4_qps", "pf_x4_qps")


async def _gather(
    concurrency: int,
    payloads: Sequence[tuple[str, dict[str, Any]]],
    url: str,
    headers: Sequence[dict[str, str]],
) -> tuple[list[float], float]:
    """Each payload's latency, ``concurrency`` at a time, and the wall time of all."""
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> float:
            path, payload = payloads[i]
            async with gate:
                started = time.perf_counter()
                r = await client.post(f"{url}{path}", json=payload, headers=headers[i])
                r.raise_for_status()
                return time.perf_counter() - started

        started = time.perf_counter()
        latencies = await asyncio.gather(*(one(i) for i in range(len(payloads))))
        return list(latencies), time.perf_counter() - started


def _plain(url: str, concurrency: int, count: int) -> tuple[list[float], float]:
    payloads = [("/v1/chat/completions", body(stream=False, max_tokens=64))] * count
    return asyncio.run(_gather(concurrency, payloads, url, [{}] * count))


def _strategy(
    url: str, model: str, strategy: str, samples: int, clients: int, count: int
) -> tuple[list[float], float]:
    questions = make_questions("test", count, seed=3, min_ops=9, max_ops=12)
    payloads = [
        (
            "/v1/chat/completions",
            {
                "model": model,
                "messages": [{"role": "user", "content": q.prompt}],
                "temperature": 1.0,
                "max_tokens": 400,
            },
        )
        for q in questions
    ]
    headers = [{"X-Strategy": strategy, "X-Budget-Samples": str(samples)}] * count
    return asyncio.run(_gather(clients, payloads, url, headers))


def _measure(choice: str, args: argparse.Namespace) -> dict[str, Any]:
    flags = ("--executor", choice, "--max-inflight-requests", "64")
    with running(f"executor-{choice}", *flags) as server:
        model = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"][0]["id"]
        _plain(server.url, 1, 2)  # warm-up
        alone, _ = _plain(server.url, 1, args.alone)
        cpu_before = engine_cpu_s(server)
        loaded, wall = _plain(server.url, args.concurrency, args.requests)
        cpu = engine_cpu_s(server) - cpu_before
        out: dict[str, Any] = {
            "executor": choice,
            "alone_p50_s": pct(alone, 0.5),
            "loaded_wall_s": wall,
            "loaded_p99_s": pct(loaded, 0.99),
            "engine_cpu_share": cpu / wall,
        }
        for name, strategy, samples, clients, count in (
            ("deepconf_x1", "deepconf", 16, 1, args.questions // 2),
            ("deepconf_x4", "deepconf", 16, 4, args.questions),
            ("pf_x4", "particle-filtering", 4, 4, args.questions),
        ):
            lat, took = _strategy(server.url, model, strategy, samples, clients, count)
            out[f"{name}_p50_s"] = statistics.median(lat)
            out[f"{name}_qps"] = len(lat) / took
    return out


def _report(runs: list[dict[str, Any]], args: argparse.Namespace, command: str) -> str:
    keys = (*LOWER_IS_BETTER, *HIGHER_IS_BETTER, "engine_cpu_share")
    lines = [
        "# The model in vLLM's engine core (`--executor uni`) against a worker process (`mp`)",
        "",
        f"`{command}` on {machine()}; testbed `base` with its reward model and PRM in process, "
        f"vLLM 0.32 CPU. alone: {args.alone} plain 64-token answers one at a time; loaded: "
        f"{args.requests} at concurrency {args.concurrency}; deepconf: DeepConf@16 on "
        f"{args.questions // 2} (x1) and {args.questions} (x4) test-split questions of 9-12 "
        f"operations at T=1; pf: particle filtering N=4 on {args.questions} of them. "
        "`engine_cpu_share`: CPU seconds of the vLLM engine processes per second of the loaded "
        "batch (1.0 = one core).",
        "",
    ]
    lines += run_rows(runs, keys, "executor")
    lines += ["", "Paired ratios, uni / mp (median, min-max over pairs):", ""]
    better = {k: "lower" for k in LOWER_IS_BETTER} | {k: "higher" for k in HIGHER_IS_BETTER}
    lines += ratio_rows(runs, keys, better)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench executor", description=__doc__)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--alone", type=int, default=8)
    parser.add_argument("--questions", type=int, default=12)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    command = ("thinkgate bench executor " + " ".join(argv)).strip()
    runs: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        for choice in CHOICES:
            runs.append(_measure(choice, args))
            print(f"pair {pair + 1} {choice}: {runs[-1]}", flush=True)
    save(_report(runs, args, command), runs, MD_PATH, JSON_PATH)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
