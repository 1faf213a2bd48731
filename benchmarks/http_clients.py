"""``thinkgate bench http-clients``: client CPU per call, httpx against aiohttp.

An echo server (uvicorn, each answer after ``--latency-ms``, standing in for an engine)
in its own process; this process keeps ``C`` calls in flight for ``--seconds`` through
one ``httpx.AsyncClient`` (64 connections kept alive: the remote engine's client before
``engines.calls``) or through ``engines.calls.AiohttpCalls`` (what the remote engine and
the PRM client use), alternating, and reads its own CPU time per call. Writes
benchmarks/results/http_clients/http-clients.md.
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
import orjson

from benchmarks.out_paths import beside, results_of
from benchmarks.servers import ROOT, free_port, machine
from engines.calls import AiohttpCalls, Calls, HttpxCalls, Timeouts

RESULTS = results_of("http_clients")
KINDS = ("httpx", "aiohttp")
KEEPALIVE = 64  # the remote engine's httpx pool kept 64 connections alive


@dataclass(frozen=True, slots=True)
class _Row:
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


def _serve_echo(port: int, latency_ms: float) -> None:
    import uvicorn

    global LATENCY_S
    LATENCY_S = latency_ms / 1000
    uvicorn.run(_echo, host="127.0.0.1", port=port, log_level="warning")


async def _measure(url: str, kind: str, in_flight: int, seconds: float) -> tuple[float, float]:
    """(client CPU ms per call, calls per second) with ``in_flight`` calls kept going."""
    calls = 0
    stop = time.monotonic() + seconds

    client: Calls = _calls(kind)

    async def loop() -> None:
        nonlocal calls
        while time.monotonic() < stop:
            answer = await client.post(url, b'{"prompt": [1, 2, 3]}', HEADERS_OUT)
            orjson.loads(answer.content)
            calls += 1

    cpu = time.process_time()
    await asyncio.gather(*(loop() for _ in range(in_flight)))
    cpu = time.process_time() - cpu
    await client.aclose()
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


HEADERS_OUT = {"content-type": "application/json"}


def _calls(kind: str) -> Calls:
    if kind == "aiohttp":
        return AiohttpCalls(Timeouts(connect=None, read=None))
    # One pool for every call, as the remote engine had it before engines.calls (made in
    # the running loop: httpx binds its pool to it).
    one = httpx.AsyncClient(
        timeout=httpx.Timeout(None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=KEEPALIVE),
    )
    return _Owned(one)


class _Owned(HttpxCalls):
    """httpx calls that close their client."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        super().__init__(client)
        self._own = client

    async def aclose(self) -> None:
        await self._own.aclose()


def run(args: argparse.Namespace) -> list[_Row]:
    port = free_port()
    code = f"from benchmarks.http_clients import serve_echo; serve_echo({port}, {args.latency_ms})"
    server = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    url = f"http://127.0.0.1:{port}/x"
    rows: list[_Row] = []
    try:
        _wait_ready(url)
        for in_flight in (int(c) for c in args.in_flight.split(",")):
            for rnd in range(args.rounds):
                for kind in KINDS if rnd % 2 == 0 else KINDS[::-1]:
                    ms, rate = asyncio.run(_measure(url, kind, in_flight, args.seconds))
                    rows.append(_Row(in_flight=in_flight, kind=kind, cpu_ms=ms, calls_s=rate))
                    print(f"{in_flight:4d} in flight, {kind}: {ms:.2f} ms CPU per call", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return rows


def _cell(rows: Sequence[_Row], in_flight: int, kind: str) -> tuple[list[float], float]:
    """CPU ms per call of each round, and the median calls per second."""
    mine = [r for r in rows if (r.in_flight, r.kind) == (in_flight, kind)]
    return [r.cpu_ms for r in mine], statistics.median(r.calls_s for r in mine)


def _report(rows: Sequence[_Row], args: argparse.Namespace) -> str:
    lines = [
        "# Client CPU per call: httpx against aiohttp",
        "",
        "`thinkgate bench http-clients`: an echo server answering after "
        f"{args.latency_ms:g} ms (uvicorn, its own process); this process keeps the calls in "
        f"flight for {args.seconds:g} s per cell through one `httpx.AsyncClient` (unbounded "
        f"connections, {KEEPALIVE} kept alive: the remote engine's before `engines.calls`) "
        "or through `engines.calls.AiohttpCalls` (what the remote engine's generation and "
        f"the PRM client use), {args.rounds} alternating rounds; CPU per call: median (range).",
        "",
        "| calls in flight | httpx: ms CPU per call | aiohttp | httpx / aiohttp | "
        "httpx: calls/s | aiohttp: calls/s |",
        "|---|---|---|---|---|---|",
    ]
    for c in dict.fromkeys(r.in_flight for r in rows):
        slow, slow_rate = _cell(rows, c, "httpx")
        fast, fast_rate = _cell(rows, c, "aiohttp")
        ratio = statistics.median(slow) / statistics.median(fast)
        lines.append(
            f"| {c} | {_med(slow)} | {_med(fast)} | {ratio:.2f}x | "
            f"{slow_rate:.0f} | {fast_rate:.0f} |"
        )
    lines += [
        "",
        f"Machine: {machine()}. The server shares the cores, so calls per second move with "
        "the client's CPU; the CPU per call is this process's alone.",
        "",
        "Command: `.venv/bin/python -m benchmarks.http_clients " + " ".join(args.argv) + "`",
        "",
    ]
    return "\n".join(lines)


def _med(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="thinkgate bench http-clients")
    p.add_argument("--in-flight", default="8,16,32,64")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-ms", type=float, default=50.0)
    p.add_argument("--out", default=str(RESULTS / "http-clients"))
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    text = _report(run(args), args)
    beside(Path(args.out), ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
