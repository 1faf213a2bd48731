"""What ``thinkgate fit`` measures, in what order, and how many questions each row gets.

A cell is a fixed plan under one budget: a deadline at a number of requests in flight,
or no limit at one request (the ceilings' rows, whose mean tokens a ceiling is held
against). Cells are taken most informative first: the deadline rows at one request in
flight (what ``auto`` plans from under a deadline), then the rows without a limit (a
token ceiling's), then the deadline rows at several requests. Every chosen cell is
measured on the same fit questions (paired, so rows are ranked on equal ground), at
least ``min_questions`` of them: the prefix of cells that fits the time at that many
questions is chosen, and the questions per row grow with the time left over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from server.calibrate.plans import CALIBRATION_GRID, CROWDS, DEADLINE_GRID, DEADLINES, FixedPlan


@dataclass(frozen=True, slots=True)
class Cell:
    plan: FixedPlan
    deadline_s: float | None = None
    clients: int = 1
    tokens: int | None = None  # a token ceiling (the judgment's; the fit measures none)

    @property
    def key(self) -> str:
        """The cell's name in the journal and the report."""
        d = "none" if self.deadline_s is None else f"{self.deadline_s:g}s"
        ceiling = "" if self.tokens is None else f"|{self.tokens}t"
        return f"{self.plan.label}|{d}|x{self.clients}{ceiling}"

    def limits(self) -> dict[str, int]:
        out = {} if self.deadline_s is None else {"deadline_ms": int(self.deadline_s * 1000)}
        return out if self.tokens is None else {**out, "tokens": self.tokens}


@dataclass(frozen=True, slots=True)
class Speeds:
    """What the probe measured: seconds per token per row alone and at ``crowd`` rows,
    and the plain plan's mean seconds per question alone."""

    alone: float
    crowded: float
    crowd: int
    plain_s: float
    answer_tokens: float  # mean tokens after the thinking

    def per_token(self, rows: int) -> float:
        """Per-row seconds per token at ``rows`` rows (linear between the two measured)."""
        if rows <= 1 or self.crowd <= 1:
            return self.alone
        share = min(1.0, (rows - 1) / (self.crowd - 1))
        return self.alone + share * (self.crowded - self.alone)


# Votes without a thinking budget: the sampling plans of a model without think tags
# (whose server refuses thinking budgets), measured on any model.
UNCAPPED: Final = (FixedPlan("self-consistency", 4), FixedPlan("self-consistency", 8))
DEADLINE_PLANS: Final = (*DEADLINE_GRID, *UNCAPPED)
CEILING_PLANS: Final = (*CALIBRATION_GRID, FixedPlan("self-consistency", 2), *UNCAPPED)


def all_cells(deadlines: Sequence[float] = DEADLINES, crowds: Sequence[int] = CROWDS) -> list[Cell]:
    """Every cell, most informative first."""
    alone = [Cell(p, d, 1) for d in deadlines for p in DEADLINE_PLANS]
    ceilings = [Cell(p) for p in CEILING_PLANS]
    crowded = [Cell(p, d, c) for c in crowds if c > 1 for d in deadlines for p in DEADLINE_PLANS]
    return [*alone, *ceilings, *crowded]


def kind(plan: FixedPlan) -> str:
    """What a server may refuse of a plan: its strategy, with a thinking budget or not."""
    return plan.strategy if plan.thinking is None else f"{plan.strategy} (thinking budget)"


def cost_s(cell: Cell, speeds: Speeds) -> float:
    """Expected wall seconds a question adds to the run in ``cell`` (requests in flight
    share the time)."""
    plan = cell.plan
    if plan.strategy == "plain" and plan.thinking is None:
        natural = speeds.plain_s
    else:
        thought = plan.thinking if plan.thinking is not None else 4 * 64
        tokens = thought + speeds.answer_tokens
        natural = tokens * speeds.per_token(plan.samples * cell.clients)
    if cell.deadline_s is not None:
        natural = min(natural, cell.deadline_s)
    return natural / cell.clients


@dataclass(frozen=True, slots=True)
class Schedule:
    cells: tuple[Cell, ...]
    questions: int  # per row
    seconds: float  # the estimate
    left_out: tuple[Cell, ...]  # by the time, least informative first


def schedule(
    cells: Sequence[Cell],
    speeds: Speeds,
    *,
    seconds: float,
    available: int,
    min_questions: int,
) -> Schedule:
    """The longest prefix of ``cells`` that ``seconds`` affords at ``min_questions`` each
    (at least the first cell), then as many questions per row as the time affords, at
    most ``available``."""
    floor = min(min_questions, available)
    chosen: list[Cell] = []
    total = 0.0
    for cell in cells:
        c = cost_s(cell, speeds)
        if chosen and (total + c) * floor > seconds:
            break
        chosen.append(cell)
        total += c
    questions = max(floor, min(available, int(seconds / max(total, 1e-9))))
    return Schedule(tuple(chosen), questions, total * questions, tuple(cells[len(chosen) :]))
