"""The tenant lines of ``thinkgate bench security``, on the default server (no tuning
flag: ``--fair-share-samples`` unset, ``--max-inflight-samples`` 1024):

- **fair by default**: tenant A keeps ``--a-inflight`` (40) self-consistency@32 requests in
  flight (each worker sends its next when one is answered, and waits the ``Retry-After``
  of a 429 as the OpenAI SDK does); tenant B sends plain requests one after another.
  Phases ``solo`` (B alone) and ``flood`` in blocks solo, flood, flood, solo, so that
  both see the same machine. Rule, fixed before the run: B's p95 beside the flood over
  B's p95 alone is at most 2.5, and B gets no errors.
- **a tenant held to 4 samples** (``budget_samples = 4`` in the keys file) submits an
  allocation batch of 64 samples; it must be refused or held to 4 samples a question
  (the output's ``thinkgate.samples``; its in-flight samples sampled from ``/metrics``),
  while B's plain requests beside it keep a p95 within the tenants benchmark's bound
  (1.25x) of B alone.

Prompts are the testbed's test questions (seeded), each request seeded.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.security_probes import MODEL, Line, bearer, chat_line, jsonl, upload

FAIR_BOUND = 2.5
NEIGHBOUR_BOUND = 1.25  # benchmarks/tenants.py's goal for B beside a held flood
A_SAMPLES = 32
PHASE_S = 300.0  # B sends no new request after this long in one phase: the run stays bounded
IDLE_S = 6.0  # past --fair-idle-s (5): the last phase's tenants are idle again


@dataclass(frozen=True)
class Answer:
    status: int
    seconds: float


def solo_p95(url: str, key: str, prompts: list[str], *, max_tokens: int) -> float:
    """B alone, one block (for a run of the held tenant's lines without the fair ones)."""
    b, _ = asyncio.run(_phase(url, ("", key), prompts, max_tokens, 0))
    return p95([x.seconds for x in b if x.status == 200])


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else float("nan")


async def _ask(
    client: httpx.AsyncClient, key: str, prompt: str, seed: int, max_tokens: int, sc: bool
) -> tuple[Answer, float]:
    headers = bearer(key)
    if sc:
        headers |= {"X-Strategy": "self-consistency", "X-Budget-Samples": str(A_SAMPLES)}
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
    }
    started = time.perf_counter()
    r = await client.post("/v1/chat/completions", json=body, headers=headers)
    wait = float(r.headers.get("retry-after", "1")) if r.status_code == 429 else 0.0
    return Answer(r.status_code, time.perf_counter() - started), wait


async def _b(client: httpx.AsyncClient, key: str, prompts: list[str], mt: int) -> list[Answer]:
    out = []
    stop = time.monotonic() + PHASE_S
    for i, prompt in enumerate(prompts):
        if time.monotonic() > stop:  # a phase's B requests end after PHASE_S (reported)
            break
        answer, wait = await _ask(client, key, prompt, i, mt, sc=False)
        out.append(answer)
        await asyncio.sleep(wait)
    return out


async def _flood_worker(
    client: httpx.AsyncClient, key: str, prompts: list[str], w: int, mt: int, log: list[Answer]
) -> None:
    i = w
    while True:
        answer, wait = await _ask(client, key, prompts[i % len(prompts)], i, mt, sc=True)
        log.append(answer)
        i += 97
        await asyncio.sleep(wait)


async def _phase(
    url: str, keys: tuple[str, str], prompts: list[str], mt: int, a_inflight: int
) -> tuple[list[Answer], list[Answer]]:
    """B's answers (and A's, when ``a_inflight``) of one phase."""
    limits = httpx.Limits(max_connections=a_inflight + 8, max_keepalive_connections=a_inflight + 8)
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as client:
        a_log: list[Answer] = []
        workers = [
            asyncio.ensure_future(_flood_worker(client, keys[0], prompts, w, mt, a_log))
            for w in range(a_inflight)
        ]
        if workers:
            await asyncio.sleep(2.0)  # the flood first: it holds the server when B comes
        b = await _b(client, keys[1], prompts, mt)
        for task in workers:  # A leaves: its open requests are dropped (the engine aborts)
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    await asyncio.sleep(IDLE_S)
    return b, a_log


def fair_by_default(
    url: str, keys: tuple[str, str], prompts: list[str], *, max_tokens: int, a_inflight: int
) -> tuple[Line, dict[str, Any]]:
    """The fairness line and its figures (``solo_p95_s``: B alone, for the neighbour line)."""
    answers: dict[str, list[Answer]] = {"solo": [], "flood": []}
    a_all: list[Answer] = []
    for name in ("solo", "flood", "flood", "solo"):
        inflight = a_inflight if name == "flood" else 0
        b, a = asyncio.run(_phase(url, keys, prompts, max_tokens, inflight))
        answers[name] += b
        a_all += a
    ok = {n: [x.seconds for x in v if x.status == 200] for n, v in answers.items()}
    solo, flood = p95(ok["solo"]), p95(ok["flood"])
    ratio = flood / solo
    errors = sum(1 for x in answers["flood"] if x.status != 200)
    a_statuses: dict[str, int] = {}
    for x in a_all:
        a_statuses[str(x.status)] = a_statuses.get(str(x.status), 0) + 1
    figures = {
        "solo_p95_s": solo,
        "flood_p95_s": flood,
        "ratio": ratio,
        "b_requests": len(answers["flood"]),
        "b_errors": errors,
        "a_statuses": a_statuses,
    }
    detail = (
        f"B p95 alone {solo:.3f} s, beside A's flood {flood:.3f} s: ratio {ratio:.2f} "
        f"(rule <= {FAIR_BOUND}); B's non-200s {errors}; A's answers {json.dumps(a_statuses)}"
    )
    met = ratio <= FAIR_BOUND and errors == 0
    name = f"fair by default: A SC@{A_SAMPLES} x{a_inflight} in flight, B plain"
    line = Line(
        name,
        len(answers["flood"]),
        errors + int(ratio > FAIR_BOUND),
        f"B p95 / B alone <= {FAIR_BOUND}",
        met,
        detail,
    )
    return line, figures


async def _inflight_peak(
    client: httpx.AsyncClient, key: str, tenant: str, done: asyncio.Event
) -> float:
    """The largest ``thinkgate_tenant_inflight_samples`` of ``tenant`` seen until ``done``."""
    peak = 0.0
    needle = f'thinkgate_tenant_inflight_samples{{tenant="{tenant}"}}'
    while not done.is_set():
        r = await client.get("/metrics", headers=bearer(key))
        for row in r.text.splitlines():
            if row.startswith(needle):
                peak = max(peak, float(row.rsplit(" ", 1)[1]))
        await asyncio.sleep(0.2)
    return peak


async def _batch_until_done(
    client: httpx.AsyncClient, key: str, batch_id: str, timeout_s: float, done: asyncio.Event
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            r = await client.get(f"/v1/batches/{batch_id}", headers=bearer(key))
            batch: dict[str, Any] = r.json()
            if batch["status"] in ("completed", "failed", "cancelled", "expired"):
                return batch
            if time.monotonic() > deadline:
                await client.post(f"/v1/batches/{batch_id}/cancel", headers=bearer(key))
                return batch | {"status": "timed out (cancelled)"}
            await asyncio.sleep(0.5)
    finally:
        done.set()


async def _b_until(
    client: httpx.AsyncClient, key: str, prompts: list[str], mt: int, done: asyncio.Event
) -> list[Answer]:
    out: list[Answer] = []
    while not done.is_set() or len(out) < 8:
        answer, wait = await _ask(
            client, key, prompts[len(out) % len(prompts)], len(out), mt, False
        )
        out.append(answer)
        await asyncio.sleep(wait)
    return out


def _submit(
    url: str, small: str, lines: list[dict[str, object]], cap: int | None
) -> httpx.Response:
    allocation: dict[str, object] = {"method": "pets", "total_budget": 64}
    if cap is not None:
        allocation["cap"] = cap
    with httpx.Client(base_url=url, timeout=120) as sync:
        file_id = upload(sync, small, jsonl(*lines)).json()["id"]
        return sync.post(
            "/v1/batches",
            headers=bearer(small),
            json={
                "input_file_id": file_id,
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                "allocation": allocation,
            },
        )


async def _held_run(
    url: str, keys: tuple[str, str], batch_id: str, prompts: list[str], mt: int, timeout_s: float
) -> dict[str, Any]:
    small, b_key = keys
    started = time.perf_counter()
    done = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=900) as client:
        batch, peak, b = await asyncio.gather(
            _batch_until_done(client, small, batch_id, timeout_s, done),
            _inflight_peak(client, small, "small", done),
            _b_until(client, b_key, prompts, mt, done),
        )
        samples: list[int] = []
        if batch.get("output_file_id"):
            out = await client.get(
                f"/v1/files/{batch['output_file_id']}/content", headers=bearer(small)
            )
            for row in out.text.splitlines():
                samples.append(int(json.loads(row)["response"]["body"]["thinkgate"]["samples"]))
    return {
        "batch": batch,
        "peak": peak,
        "b": b,
        "samples": samples,
        "seconds": time.perf_counter() - started,
    }


def held_to_four(
    url: str, keys: tuple[str, str], prompts: list[str], *, max_tokens: int, solo_p95: float
) -> list[Line]:
    """The held tenant's line and its online neighbour's (``keys``: the held tenant's and
    B's). Two submissions of 64 samples over 16 questions: one asking for up to 64 a
    question (``cap``), one leaving the cap to the server; each must be refused or held
    to 4 a question. B's requests run beside the one that runs (or the last)."""
    name = "tenant held to 4 samples: 64-sample allocation batch"
    lines = [chat_line(f"q{i}", p, max_tokens=max_tokens) for i, p in enumerate(prompts[:16])]
    notes: list[str] = []
    failures, run = 0, None
    for cap in (64, None):
        r = _submit(url, keys[0], lines, cap)
        asked = f"cap {cap}" if cap else "no cap"
        if r.status_code != 200:
            notes.append(f"{asked}: refused at create, {r.status_code} {r.text[:140]}")
            continue
        run = asyncio.run(_held_run(url, keys, r.json()["id"], prompts, max_tokens, 600))
        most = max(run["samples"], default=0)
        over = most > 4 or run["peak"] > 4 or run["batch"]["status"] != "completed"
        failures += int(over)
        notes.append(
            f"{asked}: batch {run['batch']['status']} in {run['seconds']:.1f} s, samples per "
            f"question {run['samples']} (most {most}), in-flight samples at most {run['peak']:.0f}"
        )
    held = Line(name, 2, failures, "refused or held to 4", failures == 0, "; ".join(notes))
    if run is None:
        return [held]
    b: list[Answer] = run["b"]
    ok = [x.seconds for x in b if x.status == 200]
    errors = len(b) - len(ok)
    ratio = p95(ok) / solo_p95
    neighbour = Line(
        "its online neighbour (B, plain)",
        len(b),
        errors + int(ratio > NEIGHBOUR_BOUND),
        f"B p95 / B alone <= {NEIGHBOUR_BOUND}",
        errors == 0 and ratio <= NEIGHBOUR_BOUND,
        f"B p95 beside the batch {p95(ok):.3f} s, alone {solo_p95:.3f} s: ratio {ratio:.2f}; "
        f"non-200s {errors}",
    )
    return [held, neighbour]
