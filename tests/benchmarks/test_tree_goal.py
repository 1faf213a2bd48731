"""The tree benchmark's throughput verdict (``benchmarks.tree.goal_lines``): the block
ratios, the paired accuracy interval, and where the speed comes from (tokens per
question against generated tokens per second), on blocks whose figures are set here."""

from __future__ import annotations

import argparse
import math

from benchmarks.paired import ratio_interval
from benchmarks.tree import Rate, goal_lines, parse, report

TREE = 'tree{"vote_stop":"likely"}'
ARGS = argparse.Namespace(clients=8, rate_n=16)


def _block(strategy: str, block: int, seconds: float, tokens: float, right: int) -> Rate:
    answers = tuple(k < right for k in range(16))
    return Rate(strategy, block, 16, seconds, right, tokens, answers)


def test_the_speed_splits_into_tokens_per_question_and_tokens_per_second() -> None:
    rates = [
        _block("self-consistency", 0, 16.0, 2400.0, 12),
        _block(TREE, 0, 10.0, 1200.0, 12),
        _block("self-consistency", 1, 16.0, 2400.0, 12),
        _block(TREE, 1, 10.0, 1200.0, 12),
    ]
    (line,) = goal_lines([], rates, TREE, ARGS)
    assert "median 1.60x (blocks 1.60-1.60x; geometric mean 1.60x, 95% interval" in line
    assert "accuracy 75.0% against 75.0%" in line and "(met:" in line
    # Half the tokens a question, at 1920 / 2400 = 0.8x the tokens a second: 1.6x.
    assert "0.50x its tokens per question at 0.80x its generated tokens per second" in line
    assert "1.60x its questions per second" in line


def test_the_block_ratios_interval_is_a_t_interval_on_their_logs() -> None:
    mean, lo, hi = ratio_interval([1.2, 1.8])
    assert math.isclose(mean, math.sqrt(1.2 * 1.8))
    # Two blocks: t(0.975, 1) = 12.706; the logs' stdev is |log 1.8 - log 1.2| / sqrt 2.
    half = 12.706 * abs(math.log(1.8 / 1.2)) / math.sqrt(2) / math.sqrt(2)
    assert math.isclose(lo, mean * math.exp(-half), rel_tol=1e-4)
    assert math.isclose(hi, mean * math.exp(half), rel_tol=1e-4)
    assert ratio_interval([1.6, 1.6, 1.6])[1:] == (1.6, 1.6)
    assert all(math.isnan(x) for x in ratio_interval([1.6])[1:])


def test_the_verdict_says_whether_the_whole_interval_clears_the_goal() -> None:
    def pair(block: int, tree_seconds: float) -> list[Rate]:
        return [
            _block("self-consistency", block, 16.0, 2400.0, 12),
            _block(TREE, block, tree_seconds, 1200.0, 12),
        ]

    steady = [r for b in range(4) for r in pair(b, 16.0 / 1.7)]
    (line,) = goal_lines([], steady, TREE, ARGS)
    assert "95% interval [1.70, 1.70]x, above 1.5x" in line
    # The same median with one slow and one fast block: the interval reaches below 1.5x.
    noisy = [r for b, x in enumerate((1.7, 1.7, 1.1, 2.6)) for r in pair(b, 16.0 / x)]
    (line,) = goal_lines([], noisy, TREE, ARGS)
    # The verdict is the interval's, not the median's: not met.
    assert "median 1.70x" in line and "not all above 1.5x" in line and "(not met:" in line


def test_a_question_back_in_another_block_is_one_observation() -> None:
    def block(strategy: str, b: int, right: int) -> Rate:
        answers = tuple(k < right for k in range(4))
        return Rate(
            strategy,
            b,
            4,
            4.0 if strategy == TREE else 8.0,
            right,
            100.0,
            answers,
            ids=(0, 1, 2, 3),
        )

    # The same 4 questions in 8 blocks: the interval is over 4 questions, not 32.
    rates = [r for b in range(8) for r in (block("self-consistency", b, 4), block(TREE, b, 3))]
    (line,) = goal_lines([], rates, TREE, ARGS)
    assert "over 4 distinct questions" in line
    # One of 4 lost, within a 3-point margin? No: the lower end is far below -3.
    assert "(not met:" in line


def test_a_faster_tree_below_the_interval_is_not_met() -> None:
    rates = [
        _block("self-consistency", 0, 16.0, 2400.0, 16),
        _block(TREE, 0, 8.0, 1000.0, 4),
    ]
    (line,) = goal_lines([], rates, TREE, ARGS)
    assert "median 2.00x" in line and "(not met:" in line


def test_the_clients_busy_share_weighs_each_block_by_its_seconds() -> None:
    def busy(strategy: str, block: int, seconds: float, share: float) -> Rate:
        return Rate(
            strategy, block, 16, seconds, 12, 1000.0, tuple(k < 12 for k in range(16)), share
        )

    rates = [
        busy("self-consistency", 0, 10.0, 0.9),
        busy(TREE, 0, 10.0, 0.5),
        busy("self-consistency", 1, 30.0, 0.5),
        busy(TREE, 1, 30.0, 0.9),
    ]
    (line,) = goal_lines([], rates, TREE, ARGS)
    # (0.5 * 10 + 0.9 * 30) / 40 = 80%; (0.9 * 10 + 0.5 * 30) / 40 = 60%.
    assert line.endswith("Clients busy: 80% of the blocks' time against 60%.")


def test_a_throughput_only_report_has_no_empty_tables_nor_a_missing_plot() -> None:
    args = parse(["--ns", "", "--blocks", "1", "--strategies", f"self-consistency;{TREE}"])
    rates = [
        _block("self-consistency", 0, 16.0, 2400.0, 12),
        _block(TREE, 0, 10.0, 1200.0, 12),
    ]
    text = report([], rates, args, 1.0)
    assert "## Accuracy" not in text and ".png" not in text
    assert "| 0 | self-consistency | 16 | 16.0 | 1.000 | 75 | 2400 | 100 |" in text
    assert "1.60x its questions per second" in text
