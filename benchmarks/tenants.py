"""``thinkgate bench tenants``: one tenant's flood beside another tenant's plain requests.

One ``thinkgate serve`` (the testbed ``base`` model in process, ``--max-inflight-samples
64``) with a keys file of two tenants, A and B, of equal weight. B sends plain requests
one after another (``--b-requests`` per phase); A sends self-consistency@32. Phases, in
blocks that alternate so that every phase sees the same machine (``--blocks``):

- ``solo``: B alone.
- ``floor``: B beside A held by hand to 32 rows (one SC@32 request at a time, the next
  sent as one ends): the engine's batch is shared, and no admission can do better.
- ``fair``: A floods, open loop at ``--flood-x`` times the rate A was served at in the
  floor phase (one new request every 1/(x * rate) s, never waiting for answers), with
  tenants: A is held to its share while B is active.
- ``shared``: the same flood with both keys in one tenant (the keys file rewritten, read
  again by the server without a restart): one global cap, first come first served, as
  before tenants existed.

Reported per phase: B's p50 and p95 latency, B's and A's status counts, A's throughput
(answered SC@32 requests per second), whether every 429 had a Retry-After, and whether
each tenant's billed completion tokens (``thinkgate_tenant_tokens_total``) equal the sum
of its responses' ``usage`` exactly. Goals: in ``fair``, B has no errors and its p95 is
within 1.25x of ``floor``'s; A gets only 200s and 429s with Retry-After.

Writes ``benchmarks/results/tenants/tenants.{md,json,png}``.

    .venv/bin/python -m benchmarks.tenants [--b-requests 16] [--blocks 2] [--flood-x 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import machine, thinkgate
from server.tenancy.tenants import hashed
from testbed import model_path
from testbed.task import make_questions

RESULTS = results_of("tenants")
KEY_A, KEY_B = "tg-bench-tenant-a", "tg-bench-tenant-b"
PHASES = ("solo", "floor", "fair", "shared")
CAP = 64
A_SAMPLES = 32


def _keys_file(shared: bool) -> str:
    if shared:
        return f'[tenants.shared]\nkeys = ["{hashed(KEY_A)}", "{hashed(KEY_B)}"]\n'
    return f'[tenants.a]\nkeys = ["{hashed(KEY_A)}"]\n\n[tenants.b]\nkeys = ["{hashed(KEY_B)}"]\n'


@dataclass
class _Outcome:
    tenant: str
    status: int
    latency_s: float
    completion_tokens: int = 0
    retry_after: bool = False


@dataclass
class _Phase:
    name: str
    outcomes: list[_Outcome] = field(default_factory=list)
    seconds: float = 0.0

    def of(self, tenant: str) -> list[_Outcome]:
        return [o for o in self.outcomes if o.tenant == tenant]


async def _ask(
    client: httpx.AsyncClient, tenant: str, prompt: str, *, max_tokens: int, seed: int
) -> _Outcome:
    key = KEY_A if tenant == "a" else KEY_B
    body: dict[str, Any] = {
        "model": "testbed-base",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
    }
    headers = {"Authorization": f"Bearer {key}"}
    if tenant == "a":
        headers |= {"X-Strategy": "self-consistency", "X-Budget-Samples": str(A_SAMPLES)}
    started = time.perf_counter()
    r = await client.post("/v1/chat/completions", json=body, headers=headers)
    out = _Outcome(tenant, r.status_code, time.perf_counter() - started)
    if r.status_code == 200:
        out.completion_tokens = int(r.json()["usage"]["completion_tokens"])
    out.retry_after = "retry-after" in r.headers
    return out


async def _b_loop(
    client: httpx.AsyncClient, prompts: list[str], max_tokens: int, phase: _Phase
) -> None:
    for i, prompt in enumerate(prompts):
        o = await _ask(client, "b", prompt, max_tokens=max_tokens, seed=i)
        phase.outcomes.append(o)
        if o.status == 429:  # as a client would: wait as told, then go on
            await asyncio.sleep(1.0)


async def _run_phase(
    url: str,
    name: str,
    prompts: list[str],
    *,
    max_tokens: int,
    flood_rate: float,
    keys: Path,
) -> _Phase:
    phase = _Phase(name)
    keys.write_text(_keys_file(shared=name == "shared"))
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await asyncio.sleep(6)  # past fair_idle_s: the last phase's tenants are idle
        done = asyncio.Event()
        a_tasks: list[asyncio.Task[_Outcome]] = []

        async def held() -> None:  # the floor: A at 32 rows, one request at a time
            i = 0
            while not done.is_set():
                phase.outcomes.append(
                    await _ask(
                        client, "a", prompts[i % len(prompts)], max_tokens=max_tokens, seed=i
                    )
                )
                i += 1

        async def flood() -> None:  # open loop: arrivals do not wait for answers
            i = 0
            while not done.is_set():
                p = prompts[i % len(prompts)]
                a_tasks.append(
                    asyncio.ensure_future(_ask(client, "a", p, max_tokens=max_tokens, seed=i))
                )
                i += 1
                await asyncio.sleep(1.0 / flood_rate)

        driver = None
        if name == "floor":
            driver = asyncio.ensure_future(held())
        elif name in ("fair", "shared"):
            driver = asyncio.ensure_future(flood())
            await asyncio.sleep(2.0)  # the flood first: it holds the server when B comes
        started = time.perf_counter()
        await _b_loop(client, prompts, max_tokens, phase)
        phase.seconds = time.perf_counter() - started
        done.set()
        if driver is not None:
            await driver
        phase.outcomes.extend(await asyncio.gather(*a_tasks))
    return phase


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _billed(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    auth = {"Authorization": f"Bearer {KEY_B}"}  # behind the keys: a tenant's key reads it
    for line in httpx.get(f"{url}/metrics", headers=auth, timeout=10).text.splitlines():
        if line.startswith("thinkgate_tenant_tokens_total{") and 'kind="completion"' in line:
            tenant = line.split('tenant="')[1].split('"')[0]
            out[tenant] = float(line.rsplit(" ", 1)[1])
    return out


def _summarise(phases: list[_Phase]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for name in PHASES:
        mine = [p for p in phases if p.name == name]
        b = [o for p in mine for o in p.of("b")]
        a = [o for p in mine for o in p.of("a")]
        b_ok = [o.latency_s for o in b if o.status == 200]
        a_ok = [o for o in a if o.status == 200]
        seconds = sum(p.seconds for p in mine)
        rows[name] = {
            "b_requests": len(b),
            "b_statuses": dict(Counter(str(o.status) for o in b)),
            "b_p50_s": _pct(b_ok, 0.5),
            "b_p95_s": _pct(b_ok, 0.95),
            "a_statuses": dict(Counter(str(o.status) for o in a)),
            "a_answered_per_s": len(a_ok) / seconds if seconds else 0.0,
            "a_p50_s": _pct([o.latency_s for o in a_ok], 0.5),
            "a_429_without_retry_after": sum(1 for o in a if o.status == 429 and not o.retry_after),
            "seconds": seconds,
        }
    return rows


def _report(rows: dict[str, Any], meta: dict[str, Any]) -> str:
    floor = rows["floor"]["b_p95_s"]
    lines = [
        "# Tenants: one tenant's flood beside another's plain requests",
        "",
        f"Machine: {meta['machine']}. Command: `{meta['command']}`.",
        f"Server: testbed base in process, `--max-inflight-samples {CAP}`; tenant A sends "
        f"self-consistency@{A_SAMPLES}, tenant B plain requests one after another "
        f"({meta['b_requests']} per block, {meta['blocks']} blocks per phase, phases "
        f"alternating); max_tokens {meta['max_tokens']}. A's flood: open loop at "
        f"{meta['flood_x']}x the rate A was served at in the floor phase "
        f"({meta['flood_rate']:.2f} requests/s).",
        "",
        "| phase | B p50 s | B p95 s | B p95 / floor | B statuses | A statuses | "
        "A answered/s | A 429s without Retry-After |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in PHASES:
        r = rows[name]
        lines.append(
            f"| {name} | {r['b_p50_s']:.3f} | {r['b_p95_s']:.3f} | "
            f"{r['b_p95_s'] / floor:.2f} | {_counts(r['b_statuses'])} | "
            f"{_counts(r['a_statuses']) or '-'} | {r['a_answered_per_s']:.3f} | "
            f"{r['a_429_without_retry_after']} |"
        )
    fair = rows["fair"]
    b_errors = sum(v for k, v in fair["b_statuses"].items() if k != "200")
    a_other = sum(v for k, v in fair["a_statuses"].items() if k not in ("200", "429"))
    ratio = fair["b_p95_s"] / floor
    lines += [
        "",
        f"- B's errors beside the flood with tenants: {b_errors} (goal 0): "
        f"{'met' if b_errors == 0 else 'NOT met'}.",
        f"- B's p95 beside the flood, against the floor: {ratio:.2f}x (goal at most 1.25x): "
        f"{'met' if ratio <= 1.25 else 'NOT met'}; the floor itself is "
        f"{floor / rows['solo']['b_p95_s']:.2f}x B alone.",
        f"- A's answers other than 200 and 429: {a_other}; 429s without Retry-After: "
        f"{fair['a_429_without_retry_after'] + rows['shared']['a_429_without_retry_after']}.",
        f"- Billed completion tokens equal the sum of the responses' usage: {meta['billing']}.",
        "",
    ]
    return "\n".join(lines)


def _counts(statuses: dict[str, int]) -> str:
    return ", ".join(f"{v}x{k}" for k, v in sorted(statuses.items()))


def _plot(rows: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = range(len(PHASES))
    ax.bar([x - 0.2 for x in xs], [rows[p]["b_p50_s"] for p in PHASES], 0.4, label="B p50")
    ax.bar([x + 0.2 for x in xs], [rows[p]["b_p95_s"] for p in PHASES], 0.4, label="B p95")
    ax.axhline(1.25 * rows["floor"]["b_p95_s"], color="k", ls="--", lw=1, label="1.25x floor p95")
    ax.set_xticks(list(xs), [f"{p}\n({_counts(rows[p]['b_statuses'])})" for p in PHASES])
    ax.set_ylabel("B's latency (s)")
    ax.set_title("Tenant B's plain requests beside tenant A's SC@32")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench tenants", description=__doc__)
    parser.add_argument("--b-requests", type=int, default=16)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--flood-x", type=float, default=10.0)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--out", type=Path, default=RESULTS / "tenants")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    prompts = [
        q.prompt for q in make_questions("test", args.b_requests, seed=7, min_ops=4, max_ops=6)
    ]
    state = Path(tempfile.mkdtemp(prefix="thinkgate-bench-tenants-"))
    keys = state / "keys.toml"
    keys.write_text(_keys_file(shared=False))
    log = LOGS / "tenants-server.log"
    phases: list[_Phase] = []
    meta: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.tenants", *(argv or sys.argv[1:])]),
        "b_requests": args.b_requests,
        "blocks": args.blocks,
        "flood_x": args.flood_x,
        "max_tokens": args.max_tokens,
    }
    flags = (
        *("--reward-model", "none", "--prm-model", "none", "--served-model-name", "testbed-base"),
        *("--keys-file", str(keys), "--state-dir", str(state)),
        *("--max-inflight-samples", str(CAP), "--log-level", "warning"),
    )
    with thinkgate(model_path("base"), *flags, log=log) as url:
        before = _billed(url)
        order = [
            p for block in range(args.blocks) for p in (PHASES if block % 2 == 0 else PHASES[::-1])
        ]
        bar = tqdm(total=len(order), desc="phases", unit="phase", file=sys.stderr)
        # The floor first: the flood's rate is a multiple of what A was served at there.
        first = asyncio.run(
            _run_phase(url, "floor", prompts, max_tokens=args.max_tokens, flood_rate=1.0, keys=keys)
        )
        phases.append(first)
        bar.update(1)
        order.remove("floor")
        a_ok = sum(1 for o in first.of("a") if o.status == 200)
        rate = max(a_ok, 1) / first.seconds
        meta["flood_rate"] = args.flood_x * rate
        for name in order:
            bar.set_postfix_str(name)
            phases.append(
                asyncio.run(
                    _run_phase(
                        url,
                        name,
                        prompts,
                        max_tokens=args.max_tokens,
                        flood_rate=meta["flood_rate"],
                        keys=keys,
                    )
                )
            )
            bar.update(1)
        bar.close()
        after = _billed(url)
    # Billing: tenant a and b (and "shared" in the shared phases) against the responses.
    spent = Counter[str]()
    for p in phases:
        for o in p.outcomes:
            spent["shared" if p.name == "shared" else o.tenant] += o.completion_tokens
    diffs = {t: after.get(t, 0.0) - before.get(t, 0.0) - spent[t] for t in spent}
    meta["billing"] = (
        "exactly, every tenant"
        if all(d == 0 for d in diffs.values())
        else f"NOT exact: billed minus usage {diffs}"
    )
    meta["billed_minus_usage"] = diffs
    rows = _summarise(phases)
    text = _report(rows, meta)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.md").write_text(text)
    Path(f"{args.out}.json").write_text(json.dumps({"meta": meta, "phases": rows}, indent=2))
    _plot(rows, Path(f"{args.out}.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
