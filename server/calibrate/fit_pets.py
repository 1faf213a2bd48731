"""``thinkgate fit``'s PETS table: answer pools on the fit part, drawn through the server
being fitted (strategy ``plain``, temperature 1), then the table that ``pets`` and PETS
batches allocate samples by (``strategies.pets.calibration``), fitted on the workload
rather than on the testbed's questions.

The pools take the share of ``--minutes`` the rows left (``SHARE`` of it is kept for
them): as many fit questions as that affords at ``POOL`` samples each, at least
``MIN_QUESTIONS``, else the table is left out and the profile says why. The pools are
cached in the profile directory (``POOLS_FILE``): a killed fit that resumes reuses them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from server.calibrate.fit_cells import Cell, Speeds, cost_s
from server.calibrate.plans import FixedPlan
from server.calibrate.workload import WorkQuestion
from strategies.pets.calibration.pools import PoolRecord

SHARE: Final = 0.15  # of the fit's time, kept for the pools
POOL: Final = 32  # samples per question: the table's curves reach k = 32
MIN_QUESTIONS: Final = 12  # fewer pools say nothing about the buckets' spread
AVERAGE_BUDGET: Final = 16.0  # samples per question, as the shipped table
CROWD: Final = 4  # questions in flight while drawing
MAX_N: Final = 16  # samples per request: the server's default --max-n
POOLS_FILE: Final = "pets-pools.jsonl"
TABLE_FILE: Final = "pets-table.json"


@dataclass(frozen=True, slots=True)
class PetsFit:
    """What the fit did about PETS: the table's file, or why there is none."""

    table: str | None
    questions: int
    pool: int
    reason: str | None = None


async def _pool(client: Any, model: str, q: WorkQuestion, seed: int, max_tokens: int) -> PoolRecord:
    """``POOL`` plain samples of ``q``, in requests of at most ``MAX_N`` (the server's
    default ``--max-n``) whose seeds follow on as one request's children would."""
    from strategies.answers import extract_answer
    from strategies.pets.calibration.pools import Item

    answers: list[str | None] = []
    tokens = 0
    for lo in range(0, POOL, MAX_N):
        got = await client.chat.completions.create(
            model=model,
            messages=q.chat(),
            n=min(MAX_N, POOL - lo),
            temperature=1.0,
            max_tokens=max_tokens,
            seed=seed + lo,
            extra_headers={"X-Strategy": "plain"},
        )
        for c in sorted(got.choices, key=lambda c: c.index):
            # A cut-off sample never reached its answer: no answer, not a guess.
            done = c.finish_reason == "stop"
            answers.append(extract_answer(c.message.content or "") if done else None)
        tokens += got.usage.completion_tokens if got.usage else 0
    per = tokens // max(1, len(answers))  # the API reports a sum only
    item = Item(messages=tuple(q.chat()), gold=q.answer)
    return PoolRecord(item=item, answers=tuple(answers), completion_tokens=(per,) * len(answers))


def affordable(seconds: float, speeds: Speeds, available: int) -> int:
    """Fit questions whose pools ``seconds`` affords (``CROWD`` in flight)."""
    each = cost_s(Cell(FixedPlan("self-consistency", POOL), None, CROWD), speeds)
    return min(available, int(seconds / max(each, 1e-9)))


async def fit_table(
    client: Any,
    qs: Sequence[WorkQuestion],
    *,
    model: str,
    seed: int,
    max_tokens: int,
    out: Path,
) -> PetsFit:
    """Draw (or read back) the pools of ``qs`` and write the table into ``out``."""
    from strategies.pets.calibration.calibrate import build_table, fit_pools
    from strategies.pets.calibration.pools import load_pools, save_pools

    if len(qs) < MIN_QUESTIONS:
        return PetsFit(None, len(qs), POOL, f"time for {len(qs)} pools, {MIN_QUESTIONS} needed")
    cache = out / POOLS_FILE
    if cache.exists():
        records = load_pools(cache)
    else:
        gate = asyncio.Semaphore(CROWD)

        async def one(i: int, q: WorkQuestion) -> PoolRecord:
            async with gate:
                return await _pool(client, model, q, seed + i * POOL, max_tokens)

        records = list(await asyncio.gather(*(one(i, q) for i, q in enumerate(qs))))
        save_pools(cache, records)
    fits = fit_pools([r.to_pool() for r in records], seed=seed)
    if len(fits) < MIN_QUESTIONS:
        why = f"{len(fits)} of {len(records)} pools hold an answer the vote reads"
        return PetsFit(None, len(records), POOL, why)
    table = build_table(
        fits,
        average_budget=AVERAGE_BUDGET,
        calibration={
            "model": model,
            "pool": POOL,
            "source": f"thinkgate fit: {len(records)} fit-part questions",
            "temperature": 1.0,
            "seed": seed,
        },
    )
    table.save(out / TABLE_FILE)
    return PetsFit(TABLE_FILE, len(fits), POOL)
