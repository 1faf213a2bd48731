"""``thinkgate fit``'s measurements on a running server: the probe (decode speed alone
and in a crowd, the answer's length), which strategies the server runs, the consensus of
a label-free workload, then the scheduled cells (``server.calibrate.fit_cells``) in rounds
of questions, every outcome journaled (``server.calibrate.fit_journal``).

Rounds keep the rows paired while time runs out: a round measures every cell on the same
few questions, and the rows count only the questions every cell finished.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from server.calibrate.fit_cells import Cell, Schedule, Speeds, all_cells, cost_s, kind, schedule
from server.calibrate.fit_journal import Journal
from server.calibrate.plans import FixedPlan, Outcome, ask
from server.calibrate.stats import percentile, wilson
from server.calibrate.workload import WorkQuestion

ROUND = 8  # questions per round: one crowd of the crowded cells
PROBE = 8  # questions the probe asks, alone and all at once
CONSENSUS = FixedPlan("self-consistency", 16)


@dataclass(frozen=True, slots=True)
class Run:
    """What one fit measures with: the server's client and model, the fit questions, the
    journal, and the clock it must finish by."""

    client: Any  # openai.AsyncOpenAI
    model: str
    fit: tuple[WorkQuestion, ...]
    journal: Journal
    seed: int
    ends_at: float  # time.monotonic()
    bar: Any  # tqdm-like: update(n), total

    def seed_of(self, q: WorkQuestion) -> int:
        """One seed per question, whatever its line or the cell: rows are paired."""
        return (self.seed * 2**28 + int(q.id[:7], 16)) % 2**31


async def measure_cell(run: Run, key: str, cell: Cell, qs: Sequence[WorkQuestion]) -> None:
    """``qs`` under ``cell`` with its requests in flight, skipping the journaled ones."""
    gate = asyncio.Semaphore(cell.clients)
    todo = [q for q in qs if not run.journal.has(key, q.id)]

    async def one(q: WorkQuestion) -> None:
        async with gate:
            plan = None if cell.plan.strategy == "auto" else cell.plan
            out = await ask(run.client, run.model, q, plan, cell.limits(), seed=run.seed_of(q))
            run.journal.add(key, q.id, out)
            run.bar.update(1)

    await asyncio.gather(*(one(q) for q in todo))


async def probe(run: Run) -> Speeds:
    """The plain plan on the first fit questions alone, then all at once."""
    qs = run.fit[:PROBE]
    plain = FixedPlan("plain")
    await measure_cell(run, "probe|alone", Cell(plain), qs)
    await measure_cell(run, "probe|crowd", Cell(plain, None, len(qs)), qs)
    alone = run.journal.of("probe|alone", [q.id for q in qs])
    crowd = run.journal.of("probe|crowd", [q.id for q in qs])
    return Speeds(
        alone=_per_token(alone),
        crowded=_per_token(crowd),
        crowd=len(qs),
        plain_s=sum(o.seconds for o in alone) / max(1, len(alone)),
        answer_tokens=sum(_answer_tokens(o) for o in alone) / max(1, len(alone)),
    )


def _per_token(outcomes: Sequence[Outcome]) -> float:
    rates = [o.seconds / o.tokens for o in outcomes if o.tokens > 0 and o.error is None]
    return percentile(rates, 0.5) if rates else 0.01


def _answer_tokens(o: Outcome) -> int:
    return max(0, o.tokens - o.reasoning_tokens)


def answer_reserve(run: Run) -> int:
    """The answer's length after the thinking: the 90th percentile over the probe."""
    alone = run.journal.of("probe|alone", [q.id for q in run.fit[:PROBE]])
    return max(1, int(percentile([float(_answer_tokens(o)) for o in alone if o.answered], 0.9)))


def sample_tokens(run: Run) -> int:
    """A plain sample's token limit for the PETS pools: twice the probe's longest."""
    alone = run.journal.of("probe|alone", [q.id for q in run.fit[:PROBE]])
    return max(64, 2 * max((o.tokens for o in alone), default=0))


async def runnable(run: Run, cells: Sequence[Cell]) -> dict[str, str]:
    """What the server refuses (a PRM it lacks; thinking budgets, for a model without
    think tags), by ``fit_cells.kind``, each with the status it answered: one short
    request each, on the first fit question."""
    refused: dict[str, str] = {}
    for name in dict.fromkeys(kind(c.plan) for c in cells):
        plan = next(c.plan for c in cells if kind(c.plan) == name)
        key = f"runs|{name}"
        await measure_cell(run, key, Cell(plan, 0.5), run.fit[:1])
        out = run.journal.of(key, [run.fit[0].id])
        if out and out[0].error is not None:
            refused[name] = out[0].error
    return refused


async def consensus(run: Run, qs: Sequence[WorkQuestion]) -> list[WorkQuestion]:
    """A label-free workload's questions with the answer a 16-sample vote agrees on as
    their label (questions without any answer left out)."""
    key = f"consensus|{CONSENSUS.label}"
    await measure_cell(run, key, Cell(CONSENSUS, None, ROUND), qs)
    out = []
    for q in qs:
        found = run.journal.of(key, [q.id])
        if found and found[0].answer is not None:
            out.append(replace(q, answer=found[0].answer))
    return out


def plan_cells(
    speeds: Speeds,
    refused: dict[str, str],
    *,
    seconds: float,
    available: int,
    min_questions: int,
    deadlines: Sequence[float],
    crowds: Sequence[int],
    label_free: bool,
) -> Schedule:
    cells = [c for c in all_cells(deadlines, crowds) if kind(c.plan) not in refused]
    if label_free:  # the consensus is paid per question like a cell
        seconds -= cost_s(Cell(CONSENSUS, None, ROUND), speeds) * min(min_questions, available)
    return schedule(
        cells, speeds, seconds=seconds, available=available, min_questions=min_questions
    )


async def rounds(
    run: Run, cells: Sequence[Cell], qs: Sequence[WorkQuestion], speeds: Speeds
) -> bool:
    """Every cell on ``qs``, a round of questions at a time; False when the clock ran out
    first (the rows then count the questions every cell finished)."""
    for start in range(0, len(qs), ROUND):
        part = qs[start : start + ROUND]
        for cell in cells:
            need = cost_s(cell, speeds) * len(part)
            if time.monotonic() + need > run.ends_at and not _done(run, cell, part):
                return False
            await measure_cell(run, cell.key, cell, part)
    return True


def _done(run: Run, cell: Cell, qs: Sequence[WorkQuestion]) -> bool:
    return all(run.journal.has(cell.key, q.id) for q in qs)


def finished(run: Run, cells: Sequence[Cell], qs: Sequence[WorkQuestion]) -> list[WorkQuestion]:
    """The questions every cell has an outcome for."""
    return [q for q in qs if all(run.journal.has(c.key, q.id) for c in cells)]


def row(run: Run, cell: Cell, qs: Sequence[WorkQuestion]) -> dict[str, Any]:
    """``cell``'s table row over ``qs`` (``strategies.auto.PlanRow``'s fields)."""
    outs = run.journal.of(cell.key, [q.id for q in qs])
    n = len(outs)
    right = sum(1 for o in outs if o.right and not o.late)
    low, high = wilson(right, n)
    out: dict[str, Any] = {
        "strategy": cell.plan.strategy,
        "samples": cell.plan.samples,
        "thinking": cell.plan.thinking,
        "accuracy": round(right / max(1, n), 4),
        "tokens": round(sum(o.tokens for o in outs) / max(1, n), 1),
        "seconds": round(percentile([o.seconds for o in outs], 0.9), 4),
        "questions": n,
        "low": round(low, 4),
        "high": round(high, 4),
    }
    if cell.deadline_s is not None:
        out |= {"deadline_s": cell.deadline_s, "clients": cell.clients}
    return out


def refusals(run: Run, cells: Sequence[Cell], qs: Sequence[WorkQuestion]) -> dict[str, int]:
    """Per cell, the requests the server refused (a row built on refusals is no row)."""
    counts: Counter[str] = Counter()
    for cell in cells:
        counts[cell.key] = sum(1 for o in run.journal.of(cell.key, [q.id for q in qs]) if o.error)
    return {k: v for k, v in counts.items() if v}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
