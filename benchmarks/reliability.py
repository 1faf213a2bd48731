"""``thinkgate bench reliability``: overload, faults, restarts and hostile input, measured.

Sections (``--only a,b``; default: all but ``soak``), each against its own
``thinkgate serve`` on the testbed model, driven over real HTTP:

- ``fuzz``: schemathesis against the server's own ``/openapi.json`` (``--fuzz-cases``):
  no 5xx, and the engine still serves afterwards.
- ``overload``: 10x the admission cap in concurrent streaming and JSON clients, once
  honouring Retry-After and once retrying at once: only 200s and 429s (with
  Retry-After); admitted p99 latency as a ratio to the same requests unloaded (one at a
  time) and at the cap without excess traffic; gauges back to 0.
- ``storm``: three storms of 200 clients that leave mid-stream (plain n=8,
  self-consistency 16, PETS): seconds until in-flight and engine gauges are 0, and the
  gateway's memory after each storm.
- ``death``: the engine killed under load, policy ``exit`` (time until every in-flight
  request has its answer; exit status) and ``restart`` (time back to ready).
- ``drain``: SIGTERM under load: every admitted request completes or ends with an error
  frame; exit status and time.
- ``pets``: kill -9 the gateway mid-batch, restart on the same state dir: the job
  completes with every question answered once.
- ``soak`` (``--soak-minutes``): mixed traffic; memory and open files over time.

Figures go to ``benchmarks/results/reliability/reliability.json`` (merged by section, so sections
can be rerun alone) and ``reliability.md`` (+ ``soak.png``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import ROOT, free_port, machine

RESULTS = results_of("reliability")
JSON_PATH = RESULTS / "reliability.json"
MD_PATH = RESULTS / "reliability.md"
SECTIONS = ("fuzz", "overload", "storm", "death", "drain", "drain-group", "pets", "soak")
MODEL = "testbed-base"
QUESTION = "Compute 3+4*2 mod 10."


# --- servers


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def rss_mb(self) -> float:
        """Resident memory of the gateway process (its engine processes excluded)."""
        return float(psutil.Process(self.proc.pid).memory_info().rss) / 2**20

    def open_files(self) -> int:
        return int(psutil.Process(self.proc.pid).num_fds())

    def engine_cores(self) -> list[psutil.Process]:
        return [
            p
            for p in psutil.Process(self.proc.pid).children(recursive=True)
            if "EngineCore" in " ".join([p.name(), *p.cmdline()])
        ]


def start(tag: str, *flags: str, timeout_s: float = 900.0, port: int | None = None) -> Server:
    port = port or free_port()
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    log = LOGS / f"reliability-{tag}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]
    cmd += ["--log-level", "warning", *flags]
    if "--state-dir" not in flags:  # never the user's own PETS jobs
        cmd += ["--state-dir", tempfile.mkdtemp(prefix="thinkgate-bench-state-")]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Server(f"http://127.0.0.1:{port}", proc, log)
    _wait_ready(server, timeout_s)
    return server


def _wait_ready(server: Server, timeout_s: float) -> float:
    started = time.monotonic()
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited ({server.proc.returncode}); see {server.log}")
        try:
            if httpx.get(f"{server.url}/ready", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"server not ready after {timeout_s} s; see {server.log}")
        time.sleep(0.2)


def _stop(server: Server) -> None:
    for sig, wait_s in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0)):
        if server.proc.poll() is not None:
            return
        try:
            os.killpg(server.proc.pid, sig)
            server.proc.wait(timeout=wait_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


@contextmanager
def running(tag: str, *flags: str) -> Iterator[Server]:
    server = start(tag, *flags)
    try:
        yield server
    finally:
        _stop(server)


# --- clients


@dataclass
class _Outcome:
    status: int = 0
    done: bool = False  # a JSON 200, or a stream that reached [DONE]
    error_code: str | None = None
    retry_after: str | None = None
    latency_s: float = 0.0
    ended_at: float = 0.0  # time.monotonic()


def body(*, stream: bool, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
        **extra,
    }


async def _ask(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> _Outcome:
    out = _Outcome()
    t0 = time.perf_counter()
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=payload) as r:
            out.status = r.status_code
            out.retry_after = r.headers.get("retry-after")
            if not payload.get("stream") or r.status_code != 200:
                data = orjson.loads(await r.aread())
                out.done = r.status_code == 200
                out.error_code = (data.get("error") or {}).get("code")
            else:
                async for line in r.aiter_lines():
                    if line == "data: [DONE]":
                        out.done = True
                    elif line.startswith('data: {"error"'):
                        out.error_code = orjson.loads(line[6:])["error"]["code"]
    except httpx.HTTPError as exc:
        out.error_code = f"transport:{type(exc).__name__}"
    out.latency_s = time.perf_counter() - t0
    out.ended_at = time.monotonic()
    return out


async def _ask_and_leave(client: httpx.AsyncClient, url: str, payload: dict[str, Any]) -> bool:
    """Open a stream, read its first bytes, leave. True if it had started."""
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=payload) as r:
            if r.status_code != 200:
                return False
            async for _ in r.aiter_bytes():
                return True
    except httpx.HTTPError:
        return False
    return False


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _settle(server: Server, timeout_s: float = 60.0) -> float:
    """Seconds until no request, sample or engine request is left in flight."""
    started = time.monotonic()
    keys = (
        "thinkgate_inflight_requests",
        "thinkgate_inflight_samples",
        "thinkgate_engine_unfinished_requests",
    )
    while time.monotonic() - started < timeout_s:
        m = server.metrics()
        if all(m.get(k, 0.0) == 0.0 for k in keys):
            return time.monotonic() - started
        time.sleep(0.05)
    return float("inf")


def _loop_lag_p99_s(server: Server) -> float:
    """The p99 of the gateway's event-loop lag so far (upper bucket bound, from /metrics)."""
    m = server.metrics()
    prefix = "thinkgate_event_loop_lag_seconds_bucket{le="
    buckets = sorted(
        (float(k[len(prefix) + 1 : -2]), v) for k, v in m.items() if k.startswith(prefix)
    )
    total = buckets[-1][1] if buckets else 0.0
    for bound, count in buckets:
        if count >= 0.99 * total:
            return bound
    return float("nan")


def client(limit: int = 1000) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=600, limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
    )


# --- sections


def _section_fuzz(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.fuzz import run_fuzz

    with running("fuzz") as server:
        result = dict(run_fuzz(server.url, args.fuzz_cases))
        after = httpx.post(
            f"{server.url}/v1/chat/completions", json=body(stream=False, max_tokens=8), timeout=60
        )
        result["serves_after"] = after.status_code == 200
        result["settle_s"] = _settle(server)
    return result


async def _keep_asking(url: str, clients: int, seconds: float, *, honour: bool) -> list[_Outcome]:
    """``clients`` loops asking until ``seconds`` pass; half stream. ``honour``: a 429
    waits its Retry-After before the next try (as the OpenAI SDK does); otherwise the
    client asks again at once."""
    stop_at = time.monotonic() + seconds
    outcomes: list[_Outcome] = []
    async with client() as c:

        async def loop(i: int) -> None:
            while time.monotonic() < stop_at:
                got = await _ask(c, url, body(stream=i % 2 == 0, max_tokens=64))
                outcomes.append(got)
                if honour and got.status == 429 and got.retry_after:
                    await asyncio.sleep(float(got.retry_after))

        await asyncio.gather(*(loop(i) for i in range(clients)))
    return outcomes


def _excess(url: str, clients: int, seconds: float, honour: bool, out: Any) -> None:
    """The overload's excess clients, in a process of their own: in the measuring
    process, 80 clients retrying at once also starved its event loop, and their wait
    was counted as the server's latency. Sends a summary of what they got to ``out``."""
    got = asyncio.run(_keep_asking(url, clients, seconds, honour=honour))
    out.put(
        {
            "statuses": dict(Counter(str(o.status) for o in got)),
            "429_without_retry_after": sum(1 for o in got if o.status == 429 and not o.retry_after),
            "incomplete_200": sum(1 for o in got if o.status == 200 and not o.done),
            "latencies_200": [o.latency_s for o in got if o.status == 200],
        }
    )


OVERLOAD_MODES = {"honouring": True, "hammering": False}


def _section_overload(args: argparse.Namespace) -> dict[str, Any]:
    """10x the cap, twice: clients that honour Retry-After (``honouring``, what the
    OpenAI SDK does) and clients that retry at once on a 429 (``hammering``). ``probes``
    clients are measured here, the rest (the excess) run in another process. Admitted
    latency is the probes' (a lightly loaded client loop), compared with the same
    requests one at a time (unloaded) and at the cap with no excess traffic."""
    import multiprocessing

    cap, probes = 8, 16
    result: dict[str, Any] = {"cap": cap, "clients": 10 * cap, "probe_clients": probes}
    with running("overload", "--max-inflight-requests", str(cap)) as server:

        async def alone_and_capped() -> tuple[list[_Outcome], list[_Outcome]]:
            async with client() as c:
                one = [body(stream=i % 2 == 0, max_tokens=64) for i in range(20)]
                alone = [await _ask(c, server.url, b) for b in one]
                gate = asyncio.Semaphore(cap)

                async def at_cap(b: dict[str, Any]) -> _Outcome:
                    async with gate:
                        return await _ask(c, server.url, b)

                return alone, list(await asyncio.gather(*(at_cap(b) for b in one * 3)))

        alone, capped = asyncio.run(alone_and_capped())
        p99_alone = pct([o.latency_s for o in alone], 0.99)
        p99_cap = pct([o.latency_s for o in capped], 0.99)
        result |= {
            "seconds": args.overload_s,
            "p50_alone_s": pct([o.latency_s for o in alone], 0.5),
            "p99_alone_s": p99_alone,
            "p50_at_cap_s": pct([o.latency_s for o in capped], 0.5),
            "p99_at_cap_s": p99_cap,
        }
        ctx = multiprocessing.get_context("spawn")
        for mode, honour in OVERLOAD_MODES.items():
            results = ctx.Queue()
            excess = ctx.Process(
                target=_excess,
                args=(server.url, 10 * cap - probes, args.overload_s, honour, results),
            )
            excess.start()
            probed = asyncio.run(_keep_asking(server.url, probes, args.overload_s, honour=honour))
            other = results.get(timeout=600)
            excess.join(timeout=60)
            ok = [o.latency_s for o in probed if o.status == 200]
            statuses = Counter(str(o.status) for o in probed) + Counter(other["statuses"])
            p99 = pct(ok, 0.99)
            result[mode] = {
                "statuses": dict(sorted(statuses.items())),
                "429_without_retry_after": other["429_without_retry_after"]
                + sum(1 for o in probed if o.status == 429 and not o.retry_after),
                "incomplete_200": other["incomplete_200"]
                + sum(1 for o in probed if o.status == 200 and not o.done),
                "probes_admitted": len(ok),
                "p50_admitted_s": pct(ok, 0.5),
                "p99_admitted_s": p99,
                "p99_admitted_vs_alone": p99 / p99_alone,
                "p99_admitted_vs_at_cap": p99 / p99_cap,
                "p99_excess_admitted_s": pct(other["latencies_200"], 0.99),
                "settle_s": _settle(server),
            }
        result["loop_lag_p99_le_s"] = _loop_lag_p99_s(server)
    return result


def _section_storm(args: argparse.Namespace) -> dict[str, Any]:
    kinds = [
        body(stream=True, max_tokens=300, n=8),
        body(stream=True, max_tokens=300, strategy="self-consistency", budget={"samples": 8}),
        body(stream=True, max_tokens=300, strategy="pets"),
    ]
    storms: list[dict[str, Any]] = []
    with running("storm", "--max-inflight-requests", "1024", "--max-inflight-samples", "8192") as s:
        rss0 = s.rss_mb()
        for _ in range(3):

            async def storm() -> int:
                async with client() as c:
                    gate = asyncio.Semaphore(50)

                    async def one(i: int) -> bool:
                        async with gate:
                            return await _ask_and_leave(c, s.url, kinds[i % 3])

                    return sum(await asyncio.gather(*(one(i) for i in range(200))))

            started = asyncio.run(storm())
            storms.append(
                {"left_mid_stream": started, "settle_s": _settle(s), "rss_mb": s.rss_mb()}
            )
        m = s.metrics()
        lag = _loop_lag_p99_s(s)
    return {
        "clients_per_storm": 200,
        "rss_before_mb": rss0,
        "storms": storms,
        "aborted_client_disconnect": m.get(
            'thinkgate_aborted_requests_total{reason="client_disconnect"}', 0.0
        ),
        "loop_lag_p99_le_s": lag,
    }


def _load_and(
    server: Server,
    action: Callable[[], None],
    count: int = 8,
    max_tokens: int = 400,
    samples: int = 8,
) -> list[_Outcome]:
    """Requests of hundreds of tokens in flight; ``action`` once they are; outcomes."""

    async def go() -> list[_Outcome]:
        async with client() as c:
            payloads = [
                body(
                    stream=i % 2 == 0,
                    max_tokens=max_tokens,
                    **(
                        {"n": samples}
                        if i % 4 < 2
                        else {"strategy": "self-consistency", "budget": {"samples": samples}}
                    ),
                )
                for i in range(count)
            ]
            tasks = [asyncio.create_task(_ask(c, server.url, p)) for p in payloads]
            while server.metrics().get("thinkgate_inflight_requests", 0) < count:
                await asyncio.sleep(0.05)
            action()
            return list(await asyncio.gather(*tasks))

    return asyncio.run(go())


def _section_death(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    server = start("death-exit")
    try:
        killed: list[float] = []

        def kill() -> None:
            killed.append(time.monotonic())
            for p in server.engine_cores():
                p.send_signal(signal.SIGKILL)

        outcomes = _load_and(server, kill)
        code = server.proc.wait(timeout=60)
        out["exit"] = {
            "in_flight": len(outcomes),
            "answered_503": sum(1 for o in outcomes if o.error_code == "engine_unavailable"),
            "hung_or_other": sum(1 for o in outcomes if o.error_code != "engine_unavailable"),
            "last_answer_after_kill_s": max(o.ended_at for o in outcomes) - killed[0],
            "exit_status": code,
            "exit_after_kill_s": time.monotonic() - killed[0],
        }
    finally:
        _stop(server)
    server = start("death-restart", "--on-engine-death", "restart")
    try:
        killed = []
        outcomes = _load_and(server, kill)
        not_ready = httpx.get(f"{server.url}/ready", timeout=5).status_code
        _wait_ready(server, 600)
        back_s = time.monotonic() - killed[0]
        after = httpx.post(
            f"{server.url}/v1/chat/completions", json=body(stream=False, max_tokens=8), timeout=60
        )
        out["restart"] = {
            "in_flight": len(outcomes),
            "answered_503": sum(1 for o in outcomes if o.error_code == "engine_unavailable"),
            "last_answer_after_kill_s": max(o.ended_at for o in outcomes) - killed[0],
            "ready_while_restarting": not_ready,
            "ready_again_after_kill_s": back_s,
            "serves_after": after.status_code == 200,
        }
    finally:
        _stop(server)
    return out


def _section_drain(args: argparse.Namespace) -> dict[str, Any]:
    drain_s = 10.0
    server = start("drain", "--drain-timeout-s", str(drain_s))
    signalled: list[float] = []

    def term() -> None:
        signalled.append(time.monotonic())
        server.proc.send_signal(signal.SIGTERM)

    try:
        outcomes = _load_and(server, term, count=16)
        code = server.proc.wait(timeout=120)
        exited = time.monotonic() - signalled[0]
    finally:
        _stop(server)
    kinds = Counter(
        "completed" if o.done else (o.error_code or f"status {o.status}") for o in outcomes
    )
    return {
        "in_flight": len(outcomes),
        "drain_timeout_s": drain_s,
        "ends": dict(kinds),
        "other": sum(v for k, v in kinds.items() if k not in ("completed", "shutting_down")),
        "last_answer_after_sigterm_s": max(o.ended_at for o in outcomes) - signalled[0],
        "exit_status": code,
        "exit_after_sigterm_s": exited,
        "exited_within_drain_timeout": exited <= drain_s,
    }


def _leaked_shm(log: Path) -> int:
    """Shared-memory objects Python's resource tracker found left at the exit."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return sum(int(n) for n in re.findall(r"There appear to be (\d+) leaked shared_mem", text))


def _section_drain_group(args: argparse.Namespace) -> dict[str, Any]:
    """SIGTERM to the server's whole process group (systemd's KillMode=control-group,
    supervisord's stopasgroup), 20 requests in flight that fit in the drain."""
    drain_s = 30.0
    server = start("drain-group", "--drain-timeout-s", str(drain_s))
    signalled: list[float] = []
    shm_before = {p.name for p in Path("/dev/shm").glob("psm_*")}

    def term() -> None:
        signalled.append(time.monotonic())
        os.killpg(server.proc.pid, signal.SIGTERM)

    try:
        outcomes = _load_and(server, term, count=20, max_tokens=96, samples=2)
        code = server.proc.wait(timeout=120)
        exited = time.monotonic() - signalled[0]
    finally:
        _stop(server)
    time.sleep(2)  # the resource tracker outlives its parent by a moment
    left = {p.name for p in Path("/dev/shm").glob("psm_*")} - shm_before
    return {
        "in_flight": len(outcomes),
        "drain_timeout_s": drain_s,
        "completed": sum(1 for o in outcomes if o.done),
        "exit_status": code,
        "exit_after_sigterm_s": exited,
        "leaked_shared_memory_reported": _leaked_shm(server.log),
        "shm_segments_left": len(left),
    }


def _section_pets(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="thinkgate-state-"))
    flags = ("--state-dir", str(state), "--batch-lease-s", "5")
    port = free_port()
    lines = [
        orjson.dumps(
            {
                "custom_id": f"q{i}",
                "body": {
                    "messages": [
                        {"role": "user", "content": f"Compute {i % 10}+{(3 * i) % 10}*2 mod 10."}
                    ],
                    "max_tokens": 200,
                },
            }
        ).decode()
        for i in range(60)
    ]
    server = start("pets-1", *flags, port=port)
    try:
        job = httpx.post(
            f"{server.url}/v1/pets/batches",
            params={"average_budget": 4},
            content="\n".join(lines),
            timeout=60,
        ).json()
        while True:
            snap = httpx.get(f"{server.url}/v1/pets/batches/{job['id']}", timeout=10).json()
            if snap["pets"]["samples_drawn"] >= 60:
                break
            time.sleep(0.1)
        drawn_before = snap["pets"]["samples_drawn"]
        os.killpg(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
    finally:
        _stop(server)
    killed = time.monotonic()
    server = start("pets-2", *flags, port=port)
    try:
        while True:
            snap = httpx.get(f"{server.url}/v1/pets/batches/{job['id']}", timeout=10).json()
            if snap["status"] in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.2)
        done_s = time.monotonic() - killed
        output = httpx.get(f"{server.url}/v1/pets/batches/{job['id']}/output", timeout=60)
        ids = [orjson.loads(line)["custom_id"] for line in output.text.splitlines() if line]
    finally:
        _stop(server)
    return {
        "questions": len(lines),
        "total_budget": snap["pets"]["total_budget"],
        "drawn_before_kill": drawn_before,
        "status_after_restart": snap["status"],
        "samples_drawn": snap["pets"]["samples_drawn"],
        "answered": len(ids),
        "answered_once": len(set(ids)) == len(ids) == len(lines),
        "completed_after_kill_s": done_s,
    }


def _section_soak(args: argparse.Namespace) -> dict[str, Any]:
    minutes = args.soak_minutes
    samples: list[dict[str, float]] = []
    with running("soak") as server:

        async def go() -> Counter[str]:
            counts: Counter[str] = Counter()
            stop_at = time.monotonic() + minutes * 60
            rng = random.Random(0)
            mixes: list[dict[str, Any]] = [
                body(stream=True, max_tokens=64),
                body(stream=False, max_tokens=64, n=4),
                body(stream=True, max_tokens=96, strategy="self-consistency", samples=8),
                body(stream=False, max_tokens=64, strategy="best-of-n", samples=4),
                body(stream=False, max_tokens=48, strategy="elastic", budget={"thinking": 16}),
                {**body(stream=False, max_tokens=8), "temperature": -1},  # a 400
            ]
            async with client() as c:

                async def worker() -> None:
                    while time.monotonic() < stop_at:
                        payload = rng.choice(mixes)
                        if rng.random() < 0.1:
                            await _ask_and_leave(c, server.url, {**payload, "stream": True})
                            counts["left"] += 1
                            continue
                        o = await _ask(c, server.url, payload)
                        counts[str(o.status)] += 1

                async def sampler() -> None:
                    t0 = time.monotonic()
                    while time.monotonic() < stop_at:
                        samples.append(
                            {
                                "t_min": (time.monotonic() - t0) / 60,
                                "rss_mb": server.rss_mb(),
                                "fds": float(server.open_files()),
                            }
                        )
                        await asyncio.sleep(15)

                await asyncio.gather(sampler(), *(worker() for _ in range(6)))
            return counts

        counts = asyncio.run(go())
        settle_s = _settle(server)
        lag = _loop_lag_p99_s(server)
    warm = [s for s in samples if s["t_min"] >= min(5.0, minutes / 3)]
    return {
        "minutes": minutes,
        "requests": dict(counts),
        "server_errors": sum(v for k, v in counts.items() if k.startswith("5")),
        "rss_mb_first": samples[0]["rss_mb"] if samples else None,
        "rss_mb_warm_min": min((s["rss_mb"] for s in warm), default=None),
        "rss_mb_max": max((s["rss_mb"] for s in samples), default=None),
        "rss_mb_last": samples[-1]["rss_mb"] if samples else None,
        "fds_first": samples[0]["fds"] if samples else None,
        "fds_max": max((s["fds"] for s in samples), default=None),
        "fds_last": samples[-1]["fds"] if samples else None,
        "settle_s": settle_s,
        "loop_lag_p99_le_s": lag,
        "series": samples,
    }


RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "fuzz": _section_fuzz,
    "overload": _section_overload,
    "storm": _section_storm,
    "death": _section_death,
    "drain": _section_drain,
    "drain-group": _section_drain_group,
    "pets": _section_pets,
    "soak": _section_soak,
}


# --- report


def _report(results: dict[str, Any]) -> str:
    lines = ["# Reliability, measured", ""]
    lines.append(
        "Made by `thinkgate bench reliability` (sections rerun alone with `--only`); each "
        "section's machine and command are listed with it. Testbed `base` model, vLLM 0.32 "
        "CPU, the gateway's default settings unless a flag is shown."
    )
    for name in SECTIONS:
        if name not in results:
            continue
        r = dict(results[name])
        meta = r.pop("_meta", {})
        r.pop("series", None)
        lines += ["", f"## {name}", "", f"`{meta.get('command', '')}` on {meta.get('machine', '')}"]
        lines += ["", "| figure | value |", "|---|---|"]
        for key, value in _flatten(r):
            lines.append(f"| {key} | {_fmt(value)} |")
    return "\n".join(lines) + "\n"


def _flatten(d: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, name + ".")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for i, item in enumerate(value, 1):
                yield from _flatten(item, f"{name}[{i}].")
        else:
            yield name, value


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _plot_soak(series: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    t = [s["t_min"] for s in series]
    ax.plot(t, [s["rss_mb"] for s in series], label="gateway RSS (MiB)")
    ax.set_xlabel("minutes")
    ax.set_ylabel("MiB")
    ax2 = ax.twinx()
    ax2.plot(t, [s["fds"] for s in series], color="tab:orange", label="open files")
    ax2.set_ylabel("open files")
    fig.legend(loc="lower right")
    ax.set_title("Soak: memory and open files under mixed traffic")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    parser = argparse.ArgumentParser(prog="thinkgate bench reliability", description=__doc__)
    parser.add_argument("--only", default=",".join(s for s in SECTIONS if s != "soak"))
    parser.add_argument("--fuzz-cases", type=int, default=10_000)
    parser.add_argument("--overload-s", type=float, default=60.0)
    parser.add_argument("--soak-minutes", type=float, default=30.0)
    args = parser.parse_args(list(argv) if argv is not None else None)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; have {SECTIONS}")
    results: dict[str, Any] = orjson.loads(JSON_PATH.read_bytes()) if JSON_PATH.exists() else {}
    command = "thinkgate bench reliability " + " ".join(sys.argv[1:] if argv is None else argv)
    bar = tqdm(total=len(wanted), desc="sections", unit="section", file=sys.stderr)
    for name in wanted:
        print(f"[reliability] {name} ...", flush=True)
        t0 = time.monotonic()
        result = RUNNERS[name](args)
        result["_meta"] = {
            "command": command.strip(),
            "machine": machine(),
            "seconds": round(time.monotonic() - t0, 1),
        }
        results[name] = result
        JSON_PATH.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
        MD_PATH.write_text(_report(results))
        if name == "soak" and result.get("series"):
            _plot_soak(result["series"], RESULTS / "soak.png")
        shown = {k: v for k, v in result.items() if k != "series"}
        print(f"[reliability] {name}: {orjson.dumps(shown).decode()}", flush=True)
        bar.update(1)
    bar.close()
    print(MD_PATH.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
