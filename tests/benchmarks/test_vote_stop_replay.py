"""The vote-stop replay (``benchmarks.vote_stop_replay``): its model of a tree's leaves,
waves and stop on samples whose lengths and answers are chosen here, so each outcome
(answer, thinking tokens, rounds) is worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import vote_stop_replay as replay_bench
from benchmarks.vote_stop_replay import Outcome, Rule, replay

# Four leaves of 20 tokens agree on 5 (right) in the first 32-token segment; twelve of 90
# answer 7 (wrong) in the third.
QUICK_RIGHT = [(20, True, "5")] * 4 + [(90, False, "7")] * 12


def test_without_a_stop_every_leaf_votes() -> None:
    got = replay(QUICK_RIGHT, Rule("all", 16, 1.0, stop=False), 32)
    assert got == Outcome(right=False, tokens=4 * 20 + 12 * 90, rounds=3, answered=16, answer="7")


def test_one_wave_stops_when_the_first_leaves_settle_it() -> None:
    # 4 to 0 is P(Beta(5, 1) > 1/2) = 0.969: settled after segment 1; the twelve live
    # leaves spent one segment each.
    got = replay(QUICK_RIGHT, Rule("one", 16, 0.95), 32)
    assert got == Outcome(right=True, tokens=4 * 20 + 12 * 32, rounds=1, answered=4, answer="5")


def test_a_minimum_of_answered_leaves_holds_the_stop() -> None:
    got = replay(QUICK_RIGHT, Rule("one", 16, 0.95, min_answered=8), 32)
    assert got == Outcome(right=False, tokens=4 * 20 + 12 * 90, rounds=3, answered=16, answer="7")


def test_the_next_wave_starts_once_this_one_cannot_settle() -> None:
    # Wave 1: 5, 6, 5, 6 in segment 1 and four 7s of 90 tokens. After segment 1, even the
    # four to come all joining the leader (6 to 2) would not settle it, so wave 2 starts;
    # the four 7s finish beside it, and wave 2's eight 5s settle it in its first segment.
    leaves = [(20, True, "5"), (20, False, "6"), (20, True, "5"), (20, False, "6")]
    leaves += [(90, False, "7")] * 4 + [(20, True, "5")] * 8
    got = replay(leaves, Rule("waves", 8, 0.95), 32)
    tokens = (4 * 20 + 4 * 32) + (4 * 32 + 8 * 20)
    assert got == Outcome(right=True, tokens=tokens, rounds=2, answered=12, answer="5")


def test_a_leaf_with_no_answer_joins_no_class() -> None:
    leaves = [(20, False, None)] * 3 + [(40, True, "1")]
    got = replay(leaves, Rule("all", 4, 1.0, stop=False), 32)
    assert got == Outcome(right=True, tokens=100, rounds=2, answered=4, answer="1")


def test_the_report_pairs_every_rule_with_the_first(tmp_path: Path) -> None:
    files = []
    for k in range(2):
        path = tmp_path / f"s{k}.json"
        path.write_text(json.dumps({"samples": [QUICK_RIGHT[k::2], QUICK_RIGHT[k::2]]}))
        files += ["--samples", str(path)]
    out = tmp_path / "r"
    assert replay_bench.main([*files, "--n", "16", "--deals", "3", "--out", str(out)]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "2 questions, N = 16 samples dealt 3 times" in text
    assert "| every sample (self-consistency) | 0.0 |  |" in text


def test_more_leaves_than_samples_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"samples": [QUICK_RIGHT[:8]]}))
    with pytest.raises(SystemExit, match="more than the 8 samples"):
        replay_bench.main(["--samples", str(path), "--n", "16"])
