"""``thinkgate bench engine-wait``: vLLM's 1 s engine spin against thinkgate's 1 ms, on CPU.

The gateway is started alternately with ``--engine-spin-ms 1000`` (vLLM's own behaviour)
and ``--engine-spin-ms 1`` (thinkgate's CPU default, ``engines/local/engine_wait.py``), both
with ``--executor mp`` (the worker process whose ring the spin is about), pairs
A B A B. Each server gets the same load: requests one at a time, then ``--concurrency``
clients (half streaming, half JSON, 64 tokens each with ``ignore_eos``). Reported per
run: latency p50/p99/max, wall time for the batch, and the CPU the vLLM engine processes
used; then the paired ratios (short spin / vLLM's), median and range.

Writes ``benchmarks/results/engine_wait/engine-wait.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx
import psutil

from benchmarks.out_paths import results_of
from benchmarks.paired import ratio_rows, run_rows, save
from benchmarks.reliability import Server, body, pct, running
from benchmarks.servers import machine

RESULTS = results_of("engine_wait")
MD_PATH = RESULTS / "engine-wait.md"
JSON_PATH = RESULTS / "engine-wait.json"
SPINS_MS = (1000.0, 1.0)


async def _timed(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> float:
    started = time.perf_counter()
    async with client.stream("POST", f"{url}/v1/chat/completions", json=payload) as r:
        r.raise_for_status()
        async for _ in r.aiter_bytes():
            pass
    return time.perf_counter() - started


async def _load(url: str, concurrency: int, count: int) -> tuple[list[float], float]:
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> float:
            async with gate:
                return await _timed(client, url, body(stream=i % 2 == 0, max_tokens=64))

        started = time.perf_counter()
        latencies = await asyncio.gather(*(one(i) for i in range(count)))
        return list(latencies), time.perf_counter() - started


def engine_cpu_s(server: Server) -> float:
    """CPU seconds the server's vLLM engine processes have used so far."""
    total = 0.0
    for p in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            if p.name().startswith("VLLM::"):
                total += sum(p.cpu_times()[:2])
        except psutil.NoSuchProcess:
            continue
    return total


def _measure(spin_ms: float, args: argparse.Namespace) -> dict[str, float]:
    # The spin is that of the ring between an engine core and its worker process, which
    # only ``--executor mp`` has on CPU (engines/local/executor.py).
    flags = (
        "--engine-spin-ms",
        f"{spin_ms:g}",
        "--executor",
        "mp",
        "--max-inflight-requests",
        "64",
    )
    with running(f"engine-wait-{spin_ms:g}", *flags) as server:
        alone, _ = asyncio.run(_load(server.url, 1, args.alone))
        asyncio.run(_load(server.url, args.concurrency, 2 * args.concurrency))  # warm-up
        cpu_before = engine_cpu_s(server)
        loaded, wall = asyncio.run(_load(server.url, args.concurrency, args.requests))
        cpu = engine_cpu_s(server) - cpu_before
    return {
        "spin_ms": spin_ms,
        "alone_p50_s": pct(alone, 0.5),
        "alone_p99_s": pct(alone, 0.99),
        "p50_s": pct(loaded, 0.5),
        "p99_s": pct(loaded, 0.99),
        "max_s": max(loaded),
        "wall_s": wall,
        "engine_cpu_share": cpu / wall,
    }


def _report(runs: list[dict[str, float]], args: argparse.Namespace, command: str) -> str:
    keys = ("alone_p50_s", "alone_p99_s", "p50_s", "p99_s", "max_s", "wall_s", "engine_cpu_share")
    lines = [
        "# vLLM engine spin: 1000 ms (vLLM's own) vs 1 ms (thinkgate's CPU default)",
        "",
        f"`{command}` on {machine()}; testbed `base`, vLLM 0.32 CPU; "
        f"{args.requests} requests at concurrency {args.concurrency} "
        "(half streaming, half JSON, 64 tokens, `ignore_eos`) after a warm-up; "
        f"'alone': {args.alone} requests one at a time. `engine_cpu_share`: CPU seconds of "
        "the vLLM engine processes per second of the loaded batch (1.0 = one core).",
        "",
    ]
    lines += run_rows(runs, keys, "spin_ms")
    lines += ["", "Paired ratios, 1 ms / 1000 ms (median, min-max over pairs):", ""]
    lines += ratio_rows(runs, keys)
    lines += [
        "",
        "The trade: a lone request waits for a wake-up at every step instead of spinning "
        "through it (slower alone); under concurrent load the freed core goes to the model, "
        "the gateway and the clients. `--engine-spin-ms 1000` restores vLLM's behaviour.",
    ]
    return "\n".join(lines) + "\n"


def _rewrite(args: argparse.Namespace, command: str) -> None:
    """Rebuild the table from the saved runs (after a change to the report only)."""
    runs = json.loads(JSON_PATH.read_text())["runs"]
    MD_PATH.write_text(_report(runs, args, command))


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    parser = argparse.ArgumentParser(prog="thinkgate bench engine-wait", description=__doc__)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--alone", type=int, default=10)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    command = "thinkgate bench engine-wait " + " ".join(argv)
    runs: list[dict[str, float]] = []
    bar = tqdm(total=args.pairs * len(SPINS_MS), desc="pairs x spins", unit="run", file=sys.stderr)
    for pair in range(args.pairs):
        for spin in SPINS_MS:
            runs.append(_measure(spin, args))
            print(f"pair {pair + 1} spin {spin:g} ms: {runs[-1]}", flush=True)
            bar.update(1)
    bar.close()
    save(_report(runs, args, command.strip()), runs, MD_PATH, JSON_PATH)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
