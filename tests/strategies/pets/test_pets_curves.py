"""Calibration math: consistency curves, probit fits, warm-up pattern probabilities."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from strategies.pets.calibration.curves import (
    bucket_params,
    consistency_curve,
    fit_probit,
    fit_question,
)
from strategies.pets.labels import PATTERNS, majority_label, pattern, pattern_of_counts


def exact_patterns(labels: list[int | None]) -> dict[str, float]:
    freq = Counter(labels)
    n = len(labels)
    out: dict[str, float] = {}
    for draw in itertools.product(list(freq), repeat=4):
        p = np.prod([freq[x] / n for x in draw])
        key = pattern(list(draw))
        out[key] = out.get(key, 0.0) + float(p)
    return out


@pytest.mark.parametrize(
    "labels",
    [[0] * 10, [0] * 6 + [1] * 4, [0, 1, 2, 3, 4, 5], [0] * 5 + [1] * 3 + [None] * 2],
)
def test_pattern_probs_match_enumeration(labels: list[int | None]) -> None:
    fit = fit_question(labels, k_max=8, trials=200, rng=np.random.default_rng(0))
    expected = exact_patterns(labels)
    for name, p in zip(PATTERNS, fit.pattern_probs, strict=True):
        assert p == pytest.approx(expected.get(name, 0.0), abs=1e-12)


def test_patterns_of_four() -> None:
    assert pattern([3, 1, 3, 3]) == "3+1"
    assert pattern([1, 2, 1, 2]) == "2+2"
    assert pattern([None, None, 1, 2]) == "2+1+1"
    assert {pattern(list(p)) for p in itertools.product(range(4), repeat=4)} == set(PATTERNS)
    assert pattern_of_counts([2, 1, 1]) == "2+1+1"


def test_majority_ties_go_to_first_seen_and_none_never_wins() -> None:
    assert majority_label([2, 1, 1, 2]) == 2
    assert majority_label([None, None, 3]) == 3
    assert majority_label([None]) is None


def test_consistency_curve_grows_for_a_clear_majority_and_is_one_for_unanimous() -> None:
    rng = np.random.default_rng(1)
    clear = consistency_curve([0] * 40 + [1] * 24, k_max=32, trials=4000, rng=rng)
    assert clear[0] == pytest.approx(40 / 64, abs=0.03)
    assert clear[-1] > clear[2] > 0.6
    unanimous = consistency_curve([7] * 64, k_max=8, trials=100, rng=rng)
    assert np.all(unanimous == 1.0)
    # Ties split evenly: two equal classes give A(2) = P(both l) + P(split)/2 = 1/2.
    even = consistency_curve([0, 1] * 32, k_max=2, trials=20000, rng=rng)
    assert even[1] == pytest.approx(0.5, abs=0.02)


def test_probit_fit_recovers_a_known_curve() -> None:
    from scipy.stats import norm

    k = np.arange(1, 33)
    curve = norm.cdf(0.4 * np.sqrt(k) - 0.3)
    a, b = fit_probit(curve)
    assert (a, b) == pytest.approx((0.4, -0.3), abs=1e-9)
    assert fit_probit(np.ones(32))[0] == pytest.approx(0.0, abs=1e-12)


def test_bucket_params_weight_by_pattern_probability() -> None:
    rng = np.random.default_rng(0)
    fits = [fit_question(p, k_max=16, trials=500, rng=rng) for p in ([5] * 64, [0] * 40 + [1] * 24)]
    params = bucket_params(fits)
    assert sum(params.pi) == pytest.approx(1.0)
    # Only the unanimous question can show "4" often: that bucket's slope is ~0.
    assert params.a[0] < params.a[1]
