"""PETS through the HTTP API, checked against the simulation on the cached pools.

    python benchmarks/pets.py live [--average-budget 16]

Starts a thinkgate server on ``testbed/models/base`` with a PETS table calibrated on the
cached train pools for the average budget B (at B = 16 that is the shipped table) and
answers the benchmark's test questions three ways at the same average budget: uniform
self-consistency (``X-Strategy: self-consistency``, ``X-Budget-Samples: B``), PETS
online (``X-Strategy: pets``, cap 64) and one offline PETS batch (``POST
/v1/pets/batches?average_budget=B&cap=64``). The consistency label of a question is the
majority of its cached 64-sample pool (drawn by ``pets.py pools`` with the same model and
temperature), so the live runs are scored like the simulated ones. Writes
``benchmarks/results/pets/live.md``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from benchmarks.out_paths import LOGS
from benchmarks.servers import machine, thinkgate
from strategies.pets.calibration.pools import PoolRecord


@dataclass(frozen=True, slots=True)
class _LiveRun:
    method: str
    samples: tuple[int, ...]  # per question
    answers: tuple[str | None, ...]
    seconds: float

    def sc(self, labels: Sequence[str | None]) -> float:
        return sum(a == lab for a, lab in zip(self.answers, labels, strict=True)) / len(labels)

    def accuracy(self, gold: Sequence[str | None]) -> float:
        return sum(a == g for a, g in zip(self.answers, gold, strict=True)) / len(gold)

    @property
    def mean_samples(self) -> float:
        return sum(self.samples) / len(self.samples)


def _pool_label(record: PoolRecord) -> str | None:
    """The majority answer of a stored pool (the infinite-budget stand-in)."""
    counts = Counter(a for a in record.answers if a is not None)
    return counts.most_common(1)[0][0] if counts else None


def _answer(body: dict[str, Any]) -> tuple[str | None, int]:
    info = body.get("thinkgate") or {}
    choice = (body.get("choices") or [{}])[0]
    answer = info.get("answer", (choice.get("thinkgate") or {}).get("answer"))
    return (None if answer is None else str(answer)), int(info["samples"])


async def _per_request(
    url: str, records: Sequence[PoolRecord], headers: dict[str, str], method: str, seed: int
) -> _LiveRun:
    gate = asyncio.Semaphore(8)  # enough to keep the engine's batch full on 2 cores
    bar = tqdm(total=len(records), desc=method, unit="question")
    started = time.perf_counter()

    async def one(
        client: httpx.AsyncClient, model: str, i: int, record: PoolRecord
    ) -> tuple[str | None, int]:
        body = {
            "model": model,
            "messages": list(record.item.messages),
            "temperature": 1.0,
            "max_tokens": 400,
            "seed": seed + 1000 * i,
        }
        async with gate:
            resp = await client.post("/v1/chat/completions", json=body, headers=headers)
        resp.raise_for_status()
        bar.update(1)
        return _answer(resp.json())

    async with httpx.AsyncClient(base_url=url, timeout=900.0) as client:
        listing = await client.get("/v1/models")
        listing.raise_for_status()
        model = str(listing.json()["data"][0]["id"])
        got = await asyncio.gather(*(one(client, model, i, r) for i, r in enumerate(records)))
    bar.close()
    return _LiveRun(
        method=method,
        samples=tuple(n for _, n in got),
        answers=tuple(a for a, _ in got),
        seconds=time.perf_counter() - started,
    )


def _batch(url: str, records: Sequence[PoolRecord], average_budget: float, seed: int) -> _LiveRun:
    lines = [
        json.dumps(
            {
                "custom_id": f"q{i}",
                "body": {"messages": list(r.item.messages), "max_tokens": 400},
            }
        )
        for i, r in enumerate(records)
    ]
    params: dict[str, float | int] = {"average_budget": average_budget, "cap": 64, "seed": seed}
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=None) as client:
        resp = client.post("/v1/pets/batches", params=params, content="\n".join(lines))
        resp.raise_for_status()
        job = resp.json()
        total = int(round(average_budget * len(records)))
        bar = tqdm(total=total, desc="offline batch", unit="sample")
        with client.stream("GET", f"/v1/pets/batches/{job['id']}/events") as events:
            for line in events.iter_lines():
                if line.startswith("data: {"):
                    snap = json.loads(line[6:])
                    bar.n = int(snap["pets"]["samples_drawn"])
                    bar.refresh()
        bar.close()
        done = client.get(f"/v1/pets/batches/{job['id']}").json()
        if done["status"] != "completed":
            raise RuntimeError(f"batch ended {done['status']}: {done}")
        out = client.get(f"/v1/pets/batches/{job['id']}/output").text
    by_id = {}
    for raw in out.splitlines():
        doc = json.loads(raw)
        by_id[doc["custom_id"]] = _answer(doc["response"]["body"])
    got = [by_id[f"q{i}"] for i in range(len(records))]
    return _LiveRun(
        method="PETS offline (batch API)",
        samples=tuple(n for _, n in got),
        answers=tuple(a for a, _ in got),
        seconds=time.perf_counter() - started,
    )


def run_live(
    model: Path | str,
    records: Sequence[PoolRecord],
    table: Path,
    *,
    average_budget: float,
    results: Path,
    seed: int = 7,
) -> str:
    """Run the three methods through one live server; return (and write) the report."""
    labels = [_pool_label(r) for r in records]
    gold = [r.item.gold for r in records]
    budget = int(round(average_budget))
    log = LOGS / "pets-live-server.log"
    with thinkgate(model, "--pets-table", str(table), log=log) as url:
        runs = [
            asyncio.run(
                _per_request(
                    url,
                    records,
                    {"X-Strategy": "self-consistency", "X-Budget-Samples": str(budget)},
                    f"uniform self-consistency ({budget} samples)",
                    seed,
                )
            ),
            asyncio.run(
                _per_request(
                    url,
                    records,
                    {"X-Strategy": "pets", "X-Budget-Samples": "64"},
                    "PETS online",
                    seed,
                )
            ),
            _batch(url, records, average_budget, seed),
        ]
    lines = [
        "# PETS through the HTTP API (testbed base, test questions)",
        "",
        f"{len(records)} test questions; consistency label = majority of each question's "
        "cached 64-sample pool (`pools-test.jsonl`). One live thinkgate server, "
        f"temperature 1.0, seed {seed}. Machine: {machine()}.",
        f"Command: `python benchmarks/pets.py live --average-budget {average_budget:g}`",
        "",
        "| method | samples/question | max for one question | SC | accuracy | wall s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        lines.append(
            f"| {run.method} | {run.mean_samples:.2f} | {max(run.samples)} | "
            f"{run.sc(labels):.3f} | {run.accuracy(gold):.3f} | {run.seconds:.0f} |"
        )
    report = "\n".join(lines) + "\n"
    (results / "live.md").write_text(report)
    return report
