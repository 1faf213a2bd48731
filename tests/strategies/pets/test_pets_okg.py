"""Offline PETS (OKG): the testable properties of docs/specs.md §4 (offline)."""

from __future__ import annotations

import numpy as np
import pytest

from strategies.pets.calibration.simulate import Pool, offline, run_okg_on_pools
from strategies.pets.dirichlet import argmax_probs, okg
from strategies.pets.okg import OkgAllocator, OkgConfig


def test_r_plus_higher_for_undecided_than_decided_posterior() -> None:
    est = okg(
        np.array([[2.0, 2, 1, 1], [50.0, 1, 1, 1]]), c=1.0, draws=4000, rng=np.random.default_rng(0)
    )
    assert est.gain[0] > 0.1
    assert est.gain[1] < 0.01
    assert est.gain[0] > est.gain[1]


def test_common_random_numbers_match_independent_estimates() -> None:
    alpha = np.array([[3.0, 2, 1, 1, 1]])
    est = okg(alpha, c=1.0, draws=40000, rng=np.random.default_rng(1))
    for m in range(5):
        bumped = alpha.copy()
        bumped[0, m] += 1
        ref = argmax_probs(bumped, draws=40000, rng=np.random.default_rng(2 + m)).max()
        assert est.bumped[0, m] == pytest.approx(ref, abs=0.015)
    assert est.h[0] == pytest.approx(
        argmax_probs(alpha, draws=40000, rng=np.random.default_rng(9)).max(), abs=0.015
    )


def random_pools(n: int, size: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p = rng.dirichlet(np.full(5, 0.6))
        out.append([int(x) for x in rng.choice(5, size=size, p=p)])
    return out


@pytest.mark.parametrize(("avg", "batch"), [(3.0, 1), (8.0, 4), (64.0, 8), (80.0, 3)])
def test_total_samples_equal_min_of_budget_and_available(avg: float, batch: int) -> None:
    pools = random_pools(12, 20, seed=3)
    config = OkgConfig(total_budget=int(12 * avg), cap=16, batch=batch, draws=200)
    alloc = run_okg_on_pools(pools, config)
    available = sum(min(16, len(p)) for p in pools)
    assert alloc.spent == min(int(12 * avg), available)
    assert all(alloc.result(q).samples <= 16 for q in range(12))


def test_each_observation_adds_exactly_c_to_exactly_one_entry() -> None:
    pools = random_pools(6, 16, seed=4)
    config = OkgConfig(total_budget=40, cap=16, c=0.5, draws=100, seed=5)
    alloc = OkgAllocator(6, config)
    for q, n in alloc.warmup_round():
        for _ in range(n):
            before = alloc.alpha.copy()
            alloc.observe(q, pools[q][int(alloc.used[q])])
            diff = alloc.alpha - before
            assert np.count_nonzero(diff) == 1 and diff.sum() == pytest.approx(0.5)
    while chosen := alloc.next_round():
        for q in chosen:
            before = alloc.alpha.copy()
            alloc.observe(q, pools[q][int(alloc.used[q])])
            diff = alloc.alpha - before
            assert np.count_nonzero(diff) == 1
            assert diff[q].sum() == pytest.approx(0.5)


def test_new_answers_beyond_max_options_are_discarded_but_paid() -> None:
    alloc = OkgAllocator(1, OkgConfig(total_budget=5, max_options=2, warm_up=5, draws=10))
    for q, n in alloc.warmup_round():
        for label in range(n):
            alloc.observe(q, label)
    result = alloc.result(0)
    assert (result.samples, result.discarded) == (5, 3)
    assert alloc.alpha.sum() == 2 + 2  # prior ones + one per kept answer


def test_okg_prefers_the_undecided_question() -> None:
    # Question 0 is split, question 1 unanimous: after warm-up most samples go to 0.
    pools = [[0, 1] * 16, [4] * 32]
    alloc = run_okg_on_pools(pools, OkgConfig(total_budget=24, cap=32, warm_up=2, draws=500))
    assert alloc.result(0).samples > alloc.result(1).samples


def test_deterministic_under_a_seed() -> None:
    pools = random_pools(10, 24, seed=6)

    def run(seed: int) -> list[int]:
        alloc = run_okg_on_pools(pools, OkgConfig(total_budget=80, cap=24, seed=seed, draws=200))
        return [alloc.result(q).samples for q in range(10)]

    assert run(7) == run(7)


def test_full_pool_for_every_question_gives_perfect_self_consistency() -> None:
    pools = [Pool(labels=tuple(p), gold=p[0]) for p in random_pools(8, 16, seed=8)]
    outcome = offline(pools, 16.0, runs=3, cap=16, draws=100)
    assert outcome.samples == 16
    assert outcome.sc == 1.0


def test_online_with_equal_bucket_budgets_is_uniform_self_consistency() -> None:
    from strategies.pets.calibration.simulate import online, uniform
    from strategies.pets.labels import PATTERNS
    from strategies.pets.table import Bucket, PetsTable

    pools = [Pool(labels=tuple(p), gold=p[0]) for p in random_pools(20, 32, seed=10)]
    for budget in (4, 9, 32):
        table = PetsTable(
            k0=4,
            b_max=32,
            average_budget=budget,
            buckets=tuple(Bucket(pattern=p, budget=budget, pi=0.2, a=0.1, b=0.0) for p in PATTERNS),
        )
        assert online(pools, table, runs=3, seed=2) == uniform(pools, budget, runs=3, seed=2)
