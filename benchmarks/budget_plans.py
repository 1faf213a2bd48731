"""How the budgets benchmark asks its questions: the fixed plans, ``ask``, ``ask_all`` and
``summary`` are the runtime's (``server/calibrate/plans.py``, shared with ``thinkgate
calibrate auto``); ``ask_rotated``, one client taking every plan in turn, is the
benchmark's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from server.calibrate.plans import (
    CALIBRATION_GRID,
    CROWDS,
    DEADLINE_GRID,
    DEADLINES,
    Asked,
    FixedPlan,
    Outcome,
    ask,
    ask_all,
    summary,
)

__all__ = [
    "CALIBRATION_GRID",
    "CROWDS",
    "DEADLINES",
    "DEADLINE_GRID",
    "FixedPlan",
    "Outcome",
    "ask",
    "ask_all",
    "ask_rotated",
    "summary",
]


async def ask_rotated(
    client: Any,
    model: str,
    qs: Sequence[Asked],
    plans: Sequence[FixedPlan | None],
    limits: dict[str, int],
    seed: int,
    bar: Any,
) -> list[list[Outcome]]:
    """One client: question by question, every plan in turn, the order rotated by one
    plan per question (question i seeded ``seed x 1000 + i`` for every plan).

    The server's decode-speed estimate, which sets where a deadline ends thinking, follows
    its recent calls; run plan after plan, the first of a cell would inherit the load of
    the last cell. Rotated, every plan meets the same mix. Outcomes per plan, in the
    questions' order."""
    out: list[list[Outcome]] = [[] for _ in plans]
    for i, q in enumerate(qs):
        k = i % len(plans)
        for j in [*range(k, len(plans)), *range(k)]:
            out[j].append(await ask(client, model, q, plans[j], limits, seed=seed * 1000 + i))
            bar.update(1)
    return out
