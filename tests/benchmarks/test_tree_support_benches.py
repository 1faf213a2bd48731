"""The two benchmarks docs/tree.md leans on: right answers by thinking length
(``benchmarks.tree_lengths``) and a step's cost by its rows (``benchmarks.step_rows``).
Their arithmetic and their refusals, without a server; their runs are benchmarks."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import step_rows, tree_lengths
from benchmarks.servers import given_or_thinkgate


def test_lengths_sort_each_question_into_quarters_by_thinking() -> None:
    args = tree_lengths.parse(["--n", "4", "--questions", "2"])
    # Per question: (characters of thinking, right, answer), in the engine's order.
    samples = [
        [(30, True, "3"), (10, False, "1"), (40, True, "3"), (20, False, None)],
        [(5, True, "7"), (50, True, "7"), (25, False, "2"), (15, False, "4")],
    ]
    text = tree_lengths.report(samples, args)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert rows["| shortest"] == "| shortest | 2 | 50.0 | 8 |"  # 10 (wrong), 5 (right)
    assert rows["| second"] == "| second | 2 | 0.0 | 18 |"
    assert rows["| third"] == "| third | 2 | 50.0 | 28 |"
    assert rows["| longest"] == "| longest | 2 | 100.0 | 45 |"
    assert "the shortest quarter 50.0% right, all samples 50.0%" in text


def test_lengths_need_quarters() -> None:
    with pytest.raises(SystemExit):
        tree_lengths.parse(["--n", "6"])


def test_step_rows_reports_a_step_and_a_token() -> None:
    args = step_rows.parse(["--rows", "1,4", "--tokens", "100"])
    text = step_rows.report({1: [1.0, 1.2, 0.8], 4: [2.0, 2.0, 9.0]}, args)
    assert "| 1 | 1.00 | 10.0 | 10.00 | 1.00x |" in text  # medians: 1.0 s and 2.0 s
    assert "| 4 | 2.00 | 20.0 | 5.00 | 2.00x |" in text


@pytest.mark.parametrize("rows", ["", "0,4", "-1"])
def test_step_rows_refuses_counts_that_are_not_positive(rows: str) -> None:
    with pytest.raises(SystemExit):
        step_rows.parse(["--rows", rows])


def test_a_given_url_is_used_and_no_server_started(tmp_path: Path) -> None:
    log = tmp_path / "never.log"
    with given_or_thinkgate("http://127.0.0.1:8012", log=log) as url:
        assert url == "http://127.0.0.1:8012"
    assert not log.exists()
