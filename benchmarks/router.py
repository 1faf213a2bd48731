"""thinkgate behind vLLM's router against its own balancer (``thinkgate bench remote --router``).

Two ``thinkgate replica`` servers (one core each, ``taskset``), three vLLM routers over
them (``thinkgate replica --router``'s flags, health checked every second, one policy
each), and five gateways (``--reward-model none``, both cores):

  balancer   --vllm-urls R1,R2        the gateway places calls itself
  router     --vllm-urls ROUTER       vLLM's router places them (consistent_hash on
                                      the gateway's X-Session-ID)
  router-p2  --vllm-urls ROUTER2      the same, --policy power_of_two (by load)
  router-sll --vllm-urls ROUTER3      the same, --policy sticky_least_loaded (a new
                                      session key to the least loaded worker, its
                                      follow-up calls after it)
  one        --vllm-urls R1           one replica alone

Load: ``--requests`` self-consistency requests (``--samples`` each, ``--max-tokens``,
``ignore_eos``), ``--concurrency`` in flight, the configurations taking turns for
``--rounds`` rounds. Reported per configuration: answered questions per second,
completion tokens/s, p50/p99 latency, each replica's share of the requests and its
prefix-cache hit rate (vLLM's own /metrics, before and after).

Then: 40 concurrent self-consistency@4 requests (half streamed); once replica 1 runs
some, it is SIGKILLed (each configuration but ``one``) or sent SIGTERM (a rolling
update: ``balancer``, ``router``). Counted: requests answered, error
frames, other failures, and 8 requests sent after the kill; replica 1 is restarted
before the next configuration. Writes ``benchmarks/results/router/router.md`` (+ ``.json``).

    .venv/bin/python -m benchmarks.router [--rounds 3] [--requests 48] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from tqdm import tqdm

from benchmarks.out_paths import LOGS, results_of
from benchmarks.remote import gateway, pct, pinned
from benchmarks.servers import ROOT, free_port, machine
from engines.local.replica import build_router_command, router_env

RESULTS = results_of("router")
CONFIGS = ("balancer", "router", "router-p2", "router-sll", "one")


@dataclass
class _ReplicaProc:
    """A replica this benchmark can kill and start again on the same port."""

    cores: str
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [sys.executable, "-m", "server.cli", "replica", "--port", str(self.port)]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
        log = (LOGS / f"router-replica-{self.port}.log").open("ab")
        self.proc = subprocess.Popen(
            pinned(self.cores, [*cmd, "--max-num-seqs", "64"]),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 600.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.url} exited; see {LOGS}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"replica {self.url} not ready")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                name = key.split("{")[0]
                out[name] = out.get(name, 0.0) + float(value)
        return out


@contextmanager
def _router(urls: Sequence[str], policy: str, pids: dict[str, int]) -> Iterator[str]:
    port = free_port()
    flags = ["--host", "127.0.0.1", "--port", str(port), "--policy", policy]
    flags += ["--prometheus-port", str(free_port())]
    cmd = build_router_command(urls, flags)
    log = (LOGS / "router-vllm-router.log").open("ab")
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=router_env(os.environ),
    )
    url = f"http://127.0.0.1:{port}"
    pids[policy] = proc.pid
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"vllm-router did not start; see {LOGS}")
            try:
                if httpx.get(f"{url}/readiness", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@dataclass(frozen=True, slots=True)
class _Trial:
    config: str
    round: int
    wall_s: float
    answered: int
    completion_tokens: int
    latencies_s: tuple[float, ...]
    requests_per_replica: tuple[float, ...]
    cache_hits: tuple[float, ...]
    cache_queries: tuple[float, ...]
    router_cpu_s: float  # CPU seconds the trial's router process used (0: no router)


def _body(i: int, samples: int, max_tokens: int, *, ignore_eos: bool = True) -> dict[str, Any]:
    return {
        "model": "testbed-base",
        "messages": [
            {"role": "user", "content": f"Compute {i % 10}+{(7 * i) % 10}-{(3 * i) % 10} mod 10."}
        ],
        "temperature": 1.0,
        "max_tokens": max_tokens,
        "ignore_eos": ignore_eos,
        "strategy": "self-consistency",
        "budget": {"samples": samples},
    }


async def _load(url: str, args: argparse.Namespace) -> tuple[float, int, int, list[float]]:
    gate = asyncio.Semaphore(args.concurrency)
    latencies: list[float] = []
    tokens = answered = 0

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:

        async def one(i: int) -> None:
            nonlocal tokens, answered
            async with gate:
                t0 = time.perf_counter()
                r = await client.post(
                    "/v1/chat/completions", json=_body(i, args.samples, args.max_tokens)
                )
                latencies.append(time.perf_counter() - t0)
                if r.status_code == 200:
                    answered += 1
                    tokens += r.json()["usage"]["completion_tokens"]

        start = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(args.requests)))
        return time.perf_counter() - start, answered, tokens, latencies


def _cpu_s(pid: int | None) -> float:
    if pid is None:
        return 0.0
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _counters(replicas: Sequence[_ReplicaProc]) -> list[tuple[float, float, float]]:
    out = []
    for r in replicas:
        m = r.metrics()
        out.append(
            (
                m.get("vllm:request_success_total", 0.0),
                m.get("vllm:prefix_cache_hits_total", 0.0),
                m.get("vllm:prefix_cache_queries_total", 0.0),
            )
        )
    return out


async def _one(client: httpx.AsyncClient, body: dict[str, Any], stream: bool) -> str:
    if not stream:
        r = await client.post("/v1/chat/completions", json=body)
        return "ok" if r.status_code == 200 else f"http {r.status_code}"
    async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        if r.status_code != 200:
            return f"http {r.status_code}"
        frames = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    if any(f.startswith('data: {"error"') for f in frames):
        return "error frame"
    return "ok" if frames and frames[-1] == "data: [DONE]" else "cut"


async def _kill_under_load(url: str, victim: _ReplicaProc, sig: int) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        bodies = [_body(i, 4, 160, ignore_eos=False) for i in range(40)]
        tasks = [
            asyncio.create_task(_one(client, b, stream=i % 2 == 1)) for i, b in enumerate(bodies)
        ]
        deadline = time.monotonic() + 120
        while victim.metrics().get("vllm:num_requests_running", 0.0) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the load never reached the victim")
            await asyncio.sleep(0.05)
        await asyncio.to_thread(victim.stop, sig)
        outcomes = await asyncio.gather(*tasks)
        after = await asyncio.gather(*(_one(client, b, stream=False) for b in bodies[:8]))
        ready = (await client.get("/ready")).json()
    server = ready["servers"]
    return {
        "non_streamed_ok": sum(o == "ok" for o in outcomes[0::2]),
        "streamed_ok": sum(o == "ok" for o in outcomes[1::2]),
        "error_frames": sum(o == "error frame" for o in outcomes),
        "other": sorted({o for o in outcomes if o not in ("ok", "error frame")}),
        "after_ok": sum(o == "ok" for o in after),
        "failed_calls_placed_again": sum(s["failures"] for s in server),
    }


def _report(trials: Sequence[_Trial], kills: dict[str, dict[str, Any]], args: Any) -> str:
    lines = [
        "# thinkgate behind vLLM's router vs its own balancer (thinkgate bench remote --router)",
        "",
        f"Two `thinkgate replica` servers (one core each), three `vllm-router` 0.1.17 over "
        f"them (`thinkgate replica --router`'s flags, `--policy consistent_hash`, "
        f"`power_of_two` and `sticky_least_loaded`), five gateways. Load: "
        f"{args.requests} self-consistency@{args.samples} requests of {args.max_tokens} "
        f"tokens per sample, {args.concurrency} in flight, {args.rounds} interleaved rounds.",
        "",
        "| config | q/s (median, range) | / balancer, same round | tokens/s | p50 s | p99 s | "
        "requests per replica (share) | prefix-cache hit rate per replica | router CPU s "
        "per 100 questions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    by: dict[str, list[_Trial]] = {c: [t for t in trials if t.config == c] for c in CONFIGS}
    base = {t.round: t.answered / t.wall_s for t in by["balancer"]}
    for config, ts in by.items():
        if not ts:
            continue
        qps = [t.answered / t.wall_s for t in ts]
        ratios = [t.answered / t.wall_s / base[t.round] for t in ts if t.round in base]
        lat = [x for t in ts for x in t.latencies_s]
        reqs = [sum(t.requests_per_replica[i] for t in ts) for i in range(2)]
        share = "/".join(f"{100 * r / max(sum(reqs), 1):.0f}%" for r in reqs)
        hits = [
            sum(t.cache_hits[i] for t in ts) / max(sum(t.cache_queries[i] for t in ts), 1)
            for i in range(2)
        ]
        lines.append(
            f"| {config} | {statistics.median(qps):.2f} ({min(qps):.2f}-{max(qps):.2f}) | "
            f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
            f"{statistics.median(t.completion_tokens / t.wall_s for t in ts):.0f} | "
            f"{pct(lat, 0.5):.2f} | {pct(lat, 0.99):.2f} | "
            f"{' / '.join(f'{r:.0f}' for r in reqs)} ({share}) | "
            f"{' / '.join(f'{h:.2f}' for h in hits)} | "
            f"{100 * sum(t.router_cpu_s for t in ts) / max(sum(t.answered for t in ts), 1):.2f} |"
        )
    lines += [
        "",
        "Requests per replica are vLLM's finished requests (a request of n samples counts "
        "n); `one` only has replica 1. The prefix-cache hit rate is vLLM's "
        "own (hits / queried tokens); on CPU vLLM caches whole blocks of 128 tokens, longer "
        "than these prompts, so it stays 0 here (a request's samples share its prompt "
        "inside one vLLM request either way).",
        "",
        "## Replica 1 stopped under 40 concurrent self-consistency@4 requests",
        "",
        "SIGKILL: a machine gone; SIGTERM to its process group: a rolling update "
        "(`thinkgate replica` runs vLLM with `--shutdown-timeout 30`: it finishes what it "
        "runs).",
        "",
        "| signal, config | non-streamed answered (of 20) | streamed answered (of 20) | "
        "error frames | other failures | sent after the kill, answered (of 8) | "
        "failed calls placed again |",
        "|---|---|---|---|---|---|---|",
    ]
    for config, k in kills.items():
        lines.append(
            f"| {config} | {k['non_streamed_ok']} | {k['streamed_ok']} | {k['error_frames']} | "
            f"{', '.join(k['other']) or 'none'} | {k['after_ok']} | "
            f"{k['failed_calls_placed_again']} |"
        )
    lines += [
        "",
        f"Machine: {machine()}. Command: `.venv/bin/python -m benchmarks.router "
        f"{' '.join(args.argv)}`",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--no-kill", action="store_true", help="skip the replica kill phase")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    LOGS.mkdir(parents=True, exist_ok=True)
    replicas = [_ReplicaProc("0"), _ReplicaProc("1")]
    trials: list[_Trial] = []
    kills: dict[str, dict[str, Any]] = {}  # "SIGKILL balancer" -> counts
    with ExitStack() as stack:
        for r in replicas:
            r.start()
            stack.callback(r.stop)
        for r in replicas:
            r.wait_ready()
        pids: dict[str, int] = {}
        workers = [r.url for r in replicas]
        routed = stack.enter_context(_router(workers, "consistent_hash", pids))
        routed_p2 = stack.enter_context(_router(workers, "power_of_two", pids))
        routed_sll = stack.enter_context(_router(workers, "sticky_least_loaded", pids))
        router_pid = {
            "router": pids["consistent_hash"],
            "router-p2": pids["power_of_two"],
            "router-sll": pids["sticky_least_loaded"],
        }
        flags = ("--engine", "remote", "--health-interval-s", "1")
        urls = {
            "balancer": stack.enter_context(
                gateway(None, "balancer", *flags, "--vllm-urls", ",".join(r.url for r in replicas))
            ),
            "router": stack.enter_context(gateway(None, "router", *flags, "--vllm-urls", routed)),
            "router-p2": stack.enter_context(
                gateway(None, "router-p2", *flags, "--vllm-urls", routed_p2)
            ),
            "router-sll": stack.enter_context(
                gateway(None, "router-sll", *flags, "--vllm-urls", routed_sll)
            ),
            "one": stack.enter_context(
                gateway(None, "one", *flags, "--vllm-urls", replicas[0].url)
            ),
        }
        bar = tqdm(total=args.rounds * len(CONFIGS), desc="router bench")
        for rnd in range(args.rounds):
            order = CONFIGS[rnd % len(CONFIGS) :] + CONFIGS[: rnd % len(CONFIGS)]
            for config in order:
                before = _counters(replicas)
                cpu0 = _cpu_s(router_pid.get(config))
                wall, answered, tokens, lat = asyncio.run(_load(urls[config], args))
                cpu = _cpu_s(router_pid.get(config)) - cpu0
                after = _counters(replicas)
                delta = [
                    tuple(a - b for a, b in zip(x, y, strict=True))
                    for x, y in zip(after, before, strict=True)
                ]
                trials.append(
                    _Trial(
                        config,
                        rnd,
                        wall,
                        answered,
                        tokens,
                        tuple(lat),
                        tuple(d[0] for d in delta),
                        tuple(d[1] for d in delta),
                        tuple(d[2] for d in delta),
                        cpu,
                    )
                )
                bar.update(1)
        bar.close()
        if not args.no_kill:
            for sig, config in [
                (signal.SIGKILL, "balancer"),
                (signal.SIGKILL, "router"),
                (signal.SIGKILL, "router-p2"),
                (signal.SIGKILL, "router-sll"),
                (signal.SIGTERM, "balancer"),
                (signal.SIGTERM, "router"),
            ]:
                key = f"{signal.Signals(sig).name} {config}"
                kills[key] = asyncio.run(_kill_under_load(urls[config], replicas[0], sig))
                print(key, kills[key], flush=True)
                replicas[0].start()
                replicas[0].wait_ready()
                time.sleep(3)  # the gateways' and the router's health checks see it back
    text = _report(trials, kills, args)
    (RESULTS / "router.md").write_text(text)
    (RESULTS / "router.json").write_text(
        json.dumps({"trials": [asdict(t) for t in trials], "kills": kills}, indent=1)
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
