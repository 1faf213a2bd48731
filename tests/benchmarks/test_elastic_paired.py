"""The Elastic benchmark's paired comparison on one model: elastic@base against
truncate@base question by question at each budget, with the rule stated before the run."""

from __future__ import annotations

from benchmarks.elastic import RULE, _paired_table, _Row


def _row(method: str, t: int, correct: tuple[bool, ...]) -> _Row:
    acc = sum(correct) / len(correct)
    return _Row(method, t, acc, 1.0, 10.0, float(t), correct)


def test_the_gain_is_established_only_when_the_paired_interval_clears_zero() -> None:
    wins = (True,) * 30 + (False,) * 10
    cut = (False,) * 30 + (False,) * 10
    tie = (True,) * 20 + (False,) * 20
    rows = [
        _row("elastic@base", 64, wins),
        _row("truncate@base", 64, cut),
        _row("elastic@base", 32, tie),
        _row("truncate@base", 32, tie[::-1]),  # as many right, on other questions
        _row("elastic@elastic", 64, wins),  # another model: not in the table
    ]
    table = _paired_table(rows).splitlines()
    assert len(table) == 4  # header, rule line, t = 32, t = 64
    t32, t64 = table[2], table[3]
    assert t32.startswith("| 32 |") and t32.endswith("| no |")
    assert t64.startswith("| 64 |") and "+75.0" in t64 and t64.endswith("| yes |")
    assert "above 0" in RULE
