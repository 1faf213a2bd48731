"""The DeepConf replay that chooses deepconf's settings (benchmarks/deepconf_sim.py): it
must cut, vote and count tokens the way strategies/sampling/deepconf.py and the processor do."""

from __future__ import annotations

import random

import pytest

from benchmarks.deepconf_sim import (
    OnlineConfig,
    Point,
    SimTrace,
    _Votes,
    majority,
    online,
    tokens_at,
)
from core.token_confidence import lowest_group
from strategies.selection import select_weighted, weighted_share
from strategies.voting import VoteOptions, voting_classes

W = 4


def trace(answer: int | None, confs: list[float]) -> SimTrace:
    return SimTrace.of(confs, answer, W)


def test_cut_at_the_first_full_window_below_the_threshold() -> None:
    t = trace(1, [5.0] * 6 + [1.0] * 6)
    # Windows end at tokens 4..12; the first mean below 3.0 is [5, 1, 1, 1] -> 2.0 at
    # the window ending with token 9 (the forced EOS is that token).
    assert t.cut_at(3.0, W) == 9
    assert t.cut_at(0.5, W) is None  # never below
    # A trace shorter than a window is never cut, however unsure.
    assert trace(1, [0.1, 0.1]).cut_at(3.0, W) is None
    assert t.confidence == pytest.approx(max(lowest_group([5.0] * 6 + [1.0] * 6, W), 0.0))


def test_consensus_in_the_warm_up_draws_nothing_more() -> None:
    pool = [trace(7, [5.0] * 10), trace(7, [4.0] * 12), trace(3, [9.0] * 8)]
    out = online(pool, [0, 1, 2], 3, OnlineConfig("low", 2, 1, 0.95), W)
    assert (out.answer, out.tokens, out.drawn, out.stopped) == (7, 22, 2, 0)


def test_cut_traces_count_their_tokens_and_do_not_vote() -> None:
    # Warm-up: a sure 7 and a less sure 3; threshold (low) = 90th percentile.
    pool = [
        trace(7, [5.0] * 10),
        trace(3, [4.0] * 10),
        trace(3, [9.0] * 4 + [0.5] * 20),  # drifts low: cut at token 6
        trace(3, [0.5] * 30),  # cut at its first window: 4 tokens
    ]
    out = online(pool, [0, 1, 2, 3], 4, OnlineConfig("low", 2, 2, 1.0), W)
    assert out.stopped == 2 and out.drawn == 4
    assert out.tokens == 10 + 10 + pool[2].cut_at(4.9, W) + 4  # type: ignore[operator]
    assert out.answer == 7  # the 3s that were cut do not outvote the sure 7


def test_a_consensus_mid_round_aborts_the_rest_at_the_finisher_s_length() -> None:
    pool = [
        trace(7, [5.0] * 10),
        trace(3, [5.0] * 10),
        trace(7, [6.0] * 8),  # ends first, 7 leads
        trace(7, [6.0] * 8),  # consensus 0.7 reached here (7: 17 of 22)
        trace(3, [6.0] * 50),  # aborted at 8 tokens
    ]
    out = online(pool, [0, 1, 2, 3, 4], 5, OnlineConfig("high", 2, 3, 0.7), W)
    assert out.answer == 7 and out.drawn == 5
    assert out.tokens == 10 + 10 + 8 + 8 + 8


def test_votes_match_the_strategy_s_weighted_vote() -> None:
    rng = random.Random(0)
    for _ in range(200):
        answers = [rng.choice([None, 1, 2, 3]) for _ in range(rng.randint(1, 9))]
        weights = [rng.choice([0.0, 0.5, 1.0, 2.0, rng.random()]) for _ in answers]
        votes = _Votes()
        for a, w in zip(answers, weights, strict=True):
            votes.add(a, w)
        classes = voting_classes(
            [None if a is None else str(a) for a in answers],
            weights,
            VoteOptions(vote="confidence"),
        )
        assert votes.share() == pytest.approx(weighted_share(classes))
        chosen = select_weighted(classes, 1).chosen
        if votes.total > 0:
            assert str(votes.leader()) == chosen[0].answer


def test_majority_ties_go_to_the_answer_seen_first() -> None:
    pool = [trace(3, [1.0] * 5), trace(7, [1.0] * 6), trace(7, [1.0] * 7), trace(3, [1.0] * 8)]
    assert majority(pool, [0, 1, 2, 3], 2).answer == 3
    assert majority(pool, [1, 0, 2, 3], 4).answer == 7
    assert majority(pool, [0, 1, 2, 3], 3).tokens == 18


def test_tokens_at_interpolates_on_sc_s_running_best() -> None:
    curve = [Point(60.0, 100.0), Point(80.0, 200.0), Point(78.0, 300.0), Point(90.0, 400.0)]
    assert tokens_at(curve, 50.0) == 100.0
    assert tokens_at(curve, 70.0) == pytest.approx(150.0)
    assert tokens_at(curve, 85.0) == pytest.approx(300.0)  # from 80 @ 200 to 90 @ 400
    assert tokens_at(curve, 95.0) is None
