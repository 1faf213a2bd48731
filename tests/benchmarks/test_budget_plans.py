"""The budgets benchmark's one-client runner: every plan meets every question once, the
order rotated, so no plan always runs first after another cell's load."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from benchmarks import budget_plans
from benchmarks.budget_plans import FixedPlan, Outcome, ask_rotated
from testbed.task import make_questions


class _Bar:
    def __init__(self) -> None:
        self.n = 0

    def update(self, k: int) -> None:
        self.n += k


def test_rotated_plans_meet_every_question_in_a_turning_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[int, str, int]] = []
    qs = make_questions("test", 6, seed=5, min_ops=8, max_ops=12)

    async def fake_ask(
        client: Any, model: str, q: Any, plan: FixedPlan | None, limits: Any, *, seed: int
    ) -> Outcome:
        i = qs.index(q)
        calls.append((i, "auto" if plan is None else plan.label, seed))
        return Outcome(right=i % 2 == 0, answered=True, tokens=i, seconds=0.1)

    monkeypatch.setattr(budget_plans, "ask", fake_ask)
    plans = (None, FixedPlan("plain"), FixedPlan("self-consistency", 4, 128))
    bar = _Bar()
    out = asyncio.run(ask_rotated(None, "m", qs, plans, {"deadline_ms": 500}, 5, bar))

    assert bar.n == len(qs) * len(plans)
    # Each plan's outcomes come in the questions' order, every question seeded alike.
    assert [[o.tokens for o in got] for got in out] == [list(range(6))] * 3
    assert {(i, seed) for i, _, seed in calls} == {(i, 5000 + i) for i in range(6)}
    # The first plan of each question turns: auto, plain, sc, auto, ...
    firsts = [calls[k * len(plans)][1] for k in range(len(qs))]
    assert firsts == ["auto", "plain", "self-consistency@4 t=128"] * 2
