"""Online PETS plan: the testable properties of docs/specs.md §4 (online)."""

from __future__ import annotations

import math

import pytest

from strategies.pets.allocation import allocate, log_gain
from strategies.pets.calibration.curves import BucketParams
from strategies.pets.labels import K0, PATTERNS
from strategies.pets.table import PetsTable

# Realistic buckets: agreeing warm-ups are common and settled, split ones rare and not.
PI = (0.55, 0.25, 0.08, 0.09, 0.03)
A = (0.05, 0.35, 0.30, 0.25, 0.15)
B = (2.8, 0.4, -0.1, -0.2, -0.3)


def plan(avg: float, b_max: int = 64, pi: tuple[float, ...] = PI) -> tuple[int, ...]:
    return allocate(pi, A, B, average_budget=avg, k0=K0, b_max=b_max)


@pytest.mark.parametrize("avg", [1, 4, 5, 8, 16, 32, 63.5, 64, 100])
@pytest.mark.parametrize("b_max", [4, 16, 64])
def test_budgets_stay_between_k0_and_cap_and_average_holds(avg: float, b_max: int) -> None:
    budgets = plan(avg, b_max)
    assert all(K0 <= n <= b_max for n in budgets)
    assert sum(p * n for p, n in zip(PI, budgets, strict=True)) <= max(avg, K0) + 1e-9


@pytest.mark.parametrize("avg", [0, 1, 3.99, 4])
def test_average_at_most_k0_gives_k0_everywhere(avg: float) -> None:
    assert plan(avg) == (K0,) * len(PI)


@pytest.mark.parametrize("b_max", [8, 64])
def test_average_at_least_cap_gives_cap_to_every_bucket_with_positive_slope(b_max: int) -> None:
    a = (0.0, 0.35, 0.30, -0.1, 3.0)  # a <= 0: no gain from samples; a = 3: saturated
    budgets = allocate(PI, a, B, average_budget=b_max, k0=K0, b_max=b_max)
    for slope, n in zip(a, budgets, strict=True):
        assert n == (b_max if slope > 0 else K0)


def test_equal_buckets_give_uniform_budgets() -> None:
    pi = (0.2,) * 5
    budgets = allocate(pi, (0.3,) * 5, (0.1,) * 5, average_budget=12, k0=K0, b_max=64)
    assert budgets == (12,) * 5


def test_greedy_spends_budget_where_gain_is() -> None:
    budgets = plan(16)
    # Unanimous warm-ups (settled) get the fewest; some split bucket gets many more.
    assert budgets[0] < max(budgets[1:])
    assert sum(p * n for p, n in zip(PI, budgets, strict=True)) > 15


def test_log_gain_positive_and_finite_where_phi_saturates() -> None:
    # Phi(a sqrt(k) + b) is 1.0 in float64 here, yet the gain must stay measurable.
    g = log_gain(2.0, 3.0, 40)
    assert math.isfinite(g)
    assert log_gain(0.0, 1.0, 4) == -math.inf
    assert log_gain(0.3, 0.0, 4) > log_gain(0.3, 0.0, 30)


def test_table_round_trips_and_rejects_foreign_documents(tmp_path: object) -> None:
    from pathlib import Path

    params = BucketParams(pi=PI, a=A, b=B)
    table = PetsTable.build(params, average_budget=16, b_max=64, calibration={"questions": 3})
    path = Path(str(tmp_path)) / "t.json"
    table.save(path)
    again = PetsTable.load(path)
    assert again == table
    assert [bk.pattern for bk in again.buckets] == list(PATTERNS)
    assert again.expected_budget <= 16 + 1e-9
    doc = table.to_json()
    with pytest.raises(ValueError, match="format"):
        PetsTable.from_json({**doc, "format": "other"})
    with pytest.raises(ValueError, match="version"):
        PetsTable.from_json({**doc, "version": 99})


def test_a_table_replanned_for_another_average_is_the_plan_solved_for_it() -> None:
    from strategies.pets.table import DEFAULT_TABLE, PetsTable

    table = PetsTable.load(DEFAULT_TABLE)
    assert table.replanned(table.average_budget, table.b_max) is table
    previous = None
    for avg in (4, 6, 8, 16, 32):
        plan = table.replanned(avg, table.b_max)
        assert plan.expected_budget <= avg + 1e-9
        assert all(table.k0 <= bk.budget <= table.b_max for bk in plan.buckets)
        want = allocate(
            [bk.pi for bk in table.buckets],
            [bk.a for bk in table.buckets],
            [bk.b for bk in table.buckets],
            average_budget=avg,
            k0=table.k0,
            b_max=table.b_max,
        )
        assert tuple(bk.budget for bk in plan.buckets) == want
        if previous is not None:  # a larger average never takes a sample from a bucket
            assert all(n >= p for n, p in zip(want, previous, strict=True))
        previous = want
    assert all(bk.budget == table.k0 for bk in table.replanned(2, table.b_max).buckets)
    capped = table.replanned(32, 8)
    assert max(bk.budget for bk in capped.buckets) <= 8
