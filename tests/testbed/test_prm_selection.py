"""The PRM eval's picking figures: majority, PRM-weighted vote, best score, pass@k."""

from __future__ import annotations

import argparse

import pytest

from testbed.cli import ops_range
from testbed.engine import Completion
from testbed.prm_eval import selection
from testbed.task import Question


def _pool(question: Question, answers: list[int]) -> list[Completion]:
    return [Completion(question, (), "", 0, a) for a in answers]


def test_the_vote_the_best_score_and_the_majority_can_each_differ() -> None:
    q = Question.from_expr("1+2")  # answer 3
    # Pool 1: the majority is 5 (wrong); the vote weighs four 5s at 0.1 (0.4) against
    # three 3s at 0.5 (1.5): right; the best single score is a lone 7 at 0.9: wrong.
    first = _pool(q, [5, 5, 5, 5, 3, 3, 3, 7])
    first_scores = [0.1] * 4 + [0.5] * 3 + [0.9]
    # Pool 2: majority, vote and best score all right.
    second = _pool(q, [3, 3, 3, 3, 3, 1, 2, 4])
    second_scores = [0.6] * 5 + [0.1, 0.2, 0.3]
    got = selection([first + second], first_scores + second_scores, pools=(8, 16))
    assert got["8"] == {
        "majority": 50.0,
        "prm_vote": 100.0,
        "prm_best": 50.0,
        "pass_at_k": 100.0,
        "pools": 2,
    }
    # One pool of 16: eight 3s against four 5s: majority right; the best score the 7.
    assert got["16"]["majority"] == 100.0 and got["16"]["prm_best"] == 0.0
    # A pool size the samples do not fill is left out.
    assert set(selection([first], first_scores, pools=(8, 16))) == {"8"}


def test_a_pool_without_a_right_sample_is_wrong_for_every_rule() -> None:
    q = Question.from_expr("1+2")
    got = selection([_pool(q, [4, 4, 5, 6])], [0.9, 0.8, 0.7, 0.6], pools=(4,))
    assert got["4"] == {
        "majority": 0.0,
        "prm_vote": 0.0,
        "prm_best": 0.0,
        "pass_at_k": 0.0,
        "pools": 1,
    }


def test_ops_range_reads_min_max_and_refuses_nonsense() -> None:
    assert ops_range("12-13") == (12, 13)
    assert ops_range("9") == (9, 9)
    for bad in ("a-b", "13-12", "0-3"):
        with pytest.raises(argparse.ArgumentTypeError):
            ops_range(bad)
