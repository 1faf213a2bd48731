"""``thinkgate bench client-pools``: client CPU per call, one httpx pool against shards.

An echo server (uvicorn, each answer after ``--latency-ms``, standing in for an engine)
in its own process; this process keeps ``C`` calls in flight for ``--seconds`` through
one ``httpx.AsyncClient`` (as the remote engine did) or through ``ClientShards`` (pools
of at most 8 calls: engines/client_shards.py), alternating, and reads its own CPU time
per call. Writes benchmarks/results/client-pools.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.out_paths import beside
from benchmarks.servers import ROOT, free_port, machine
from engines.client_shards import ClientShards

RESULTS = ROOT / "benchmarks" / "results"
KINDS = ("one pool", "shards")
ONE_POOL_KEEPALIVE = 64  # the remote engine's single pool kept 64 connections alive


@dataclass(frozen=True, slots=True)
class Row:
    in_flight: int
    kind: str
    cpu_ms: float  # this process's CPU per call
    calls_s: float


LATENCY_S = 0.05  # set by serve_echo in the server's process
HEADERS = [(b"content-type", b"application/json")]


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The stand-in engine: reads the body, waits, answers a small JSON."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await asyncio.sleep(LATENCY_S)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": b'{"token_ids": [1, 2, 3, 4]}'})


def serve_echo(port: int, latency_ms: float) -> None:
    import uvicorn

    global LATENCY_S
    LATENCY_S = latency_ms / 1000
    uvicorn.run(_echo, host="127.0.0.1", port=port, log_level="warning")


async def measure(
    url: str, shards: ClientShards, in_flight: int, seconds: float
) -> tuple[float, float]:
    """(client CPU ms per call, calls per second) with ``in_flight`` calls kept going."""
    calls = 0
    stop = time.monotonic() + seconds

    async def loop() -> None:
        nonlocal calls
        while time.monotonic() < stop:
            async with shards.client() as client:
                answer = await client.post(url, content=b'{"prompt": [1, 2, 3]}')
            answer.json()
            calls += 1

    cpu = time.process_time()
    await asyncio.gather(*(loop() for _ in range(in_flight)))
    cpu = time.process_time() - cpu
    await shards.aclose()
    return 1e3 * cpu / calls, calls / seconds


def _wait_ready(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            httpx.post(url, timeout=2)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _shards(kind: str, timeout: httpx.Timeout) -> ClientShards:
    if kind == "shards":
        return ClientShards.with_timeout(timeout)
    # One pool for every call, as the remote engine had it before the shards.
    one = httpx.AsyncClient(
        timeout=timeout,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=ONE_POOL_KEEPALIVE),
    )
    return ClientShards(lambda: one, max_shards=1)


def run(args: argparse.Namespace) -> list[Row]:
    port = free_port()
    code = f"from benchmarks.client_pools import serve_echo; serve_echo({port}, {args.latency_ms})"
    server = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    url = f"http://127.0.0.1:{port}/x"
    rows: list[Row] = []
    try:
        _wait_ready(url)
        for in_flight in (int(c) for c in args.in_flight.split(",")):
            for rnd in range(args.rounds):
                for kind in KINDS if rnd % 2 == 0 else KINDS[::-1]:
                    shards = _shards(kind, httpx.Timeout(None))
                    ms, rate = asyncio.run(measure(url, shards, in_flight, args.seconds))
                    rows.append(Row(in_flight=in_flight, kind=kind, cpu_ms=ms, calls_s=rate))
                    print(f"{in_flight:4d} in flight, {kind}: {ms:.2f} ms CPU per call", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return rows


def _cell(rows: Sequence[Row], in_flight: int, kind: str) -> tuple[list[float], float]:
    """CPU ms per call of each round, and the median calls per second."""
    mine = [r for r in rows if (r.in_flight, r.kind) == (in_flight, kind)]
    return [r.cpu_ms for r in mine], statistics.median(r.calls_s for r in mine)


def report(rows: Sequence[Row], args: argparse.Namespace) -> str:
    lines = [
        "# Client CPU per call: one httpx pool against pools of at most 8",
        "",
        "`thinkgate bench client-pools`: an echo server answering after "
        f"{args.latency_ms:g} ms (uvicorn, its own process); this process keeps the calls in "
        f"flight for {args.seconds:g} s per cell through one httpx pool (unbounded "
        f"connections, {ONE_POOL_KEEPALIVE} kept alive: the remote engine's until the shards) "
        "or through `ClientShards` "
        "(engines/client_shards.py: a new pool whenever every pool holds 8 calls), "
        f"{args.rounds} alternating rounds; CPU per call: median (range).",
        "",
        "| calls in flight | one pool: ms CPU per call | shards | one pool / shards | "
        "one pool: calls/s | shards: calls/s |",
        "|---|---|---|---|---|---|",
    ]
    for c in dict.fromkeys(r.in_flight for r in rows):
        one, one_rate = _cell(rows, c, "one pool")
        sharded, sharded_rate = _cell(rows, c, "shards")
        ratio = statistics.median(one) / statistics.median(sharded)
        lines.append(
            f"| {c} | {_med(one)} | {_med(sharded)} | {ratio:.2f}x | "
            f"{one_rate:.0f} | {sharded_rate:.0f} |"
        )
    lines += [
        "",
        f"Machine: {machine()}. The server shares the cores, so calls per second move with "
        "the client's CPU; the CPU per call is this process's alone.",
        "",
        "Command: `.venv/bin/python -m benchmarks.client_pools " + " ".join(args.argv) + "`",
        "",
    ]
    return "\n".join(lines)


def _med(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="thinkgate bench client-pools")
    p.add_argument("--in-flight", default="8,16,32,64")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--out", default=str(RESULTS / "client-pools"))
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    text = report(run(args), args)
    beside(Path(args.out), ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
