"""The table-less fallback: stop when the posterior says the majority is settled."""

from __future__ import annotations

import numpy as np
import pytest

from strategies.pets.adaptive import AdaptiveRule, majority_confidence, next_round


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def test_confidence_of_four_agreeing_answers_is_one_minus_half_to_the_fifth() -> None:
    # Dir(5, 1) over {seen, unseen}: P(p_seen > p_unseen) = 1 - 0.5**5.
    got = majority_confidence([3, 3, 3, 3], draws=200_000, rng=rng())
    assert got == pytest.approx(1 - 0.5**5, abs=0.005)


def test_confidence_grows_with_agreement_and_is_zero_without_answers() -> None:
    split = majority_confidence([1, 2, 1, 2], draws=20_000, rng=rng())
    leaning = majority_confidence([1, 2, 1, 1, 1, 1, 2, 1], draws=20_000, rng=rng())
    assert split < 0.6 < leaning
    assert majority_confidence([None, None], draws=100, rng=rng()) == 0.0


def test_rounds_stop_at_threshold_or_cap() -> None:
    rule = AdaptiveRule(threshold=0.95, round_size=4, draws=20_000)
    assert next_round([5, 5, 5, 5, 5, 5], cap=16, rule=rule, rng=rng())[0] == 0
    more, confidence = next_round([1, 2, 1, 2], cap=16, rule=rule, rng=rng())
    assert more == 4 and confidence < 0.95
    assert next_round([1, 2, 1, 2, 3, 4], cap=8, rule=rule, rng=rng())[0] == 2  # cap left
    assert next_round([1, 2] * 4, cap=8, rule=rule, rng=rng())[0] == 0
