"""`eval --card` compares a model's thinking-cut curve with base's card."""

from __future__ import annotations

import json

from testbed import model_path
from testbed.evaluate import format_report, versus_base_under_cut


def _report(**acc: float) -> dict[str, object]:
    return {
        "split": "test",
        "questions_per_difficulty": 10,
        "seed": 0,
        "cut": {"tokens_per_op": {k: {"acc_6_12": v, "acc_1_5": 0.0} for k, v in acc.items()}},
    }


def test_points_per_cut_on_the_same_questions() -> None:
    mine = _report(**{"8": 0.9, "16": 1.0})
    base: dict[str, object] = {"eval": _report(**{"8": 0.1, "12": 0.2})}
    versus = versus_base_under_cut(mine, base)
    assert versus is not None
    assert versus["acc_6_12_by_tokens_per_op"] == {"8": {"base": 0.1, "this": 0.9, "points": 80.0}}


def test_no_comparison_across_different_questions_or_without_a_curve() -> None:
    other_seed: dict[str, object] = {"eval": {**_report(**{"8": 0.1}), "seed": 1}}
    assert versus_base_under_cut(_report(**{"8": 0.9}), other_seed) is None
    assert versus_base_under_cut(_report(**{"8": 0.9}), {}) is None
    no_curve = {k: v for k, v in _report(**{"8": 0.9}).items() if k != "cut"}
    with_curve: dict[str, object] = {"eval": _report(**{"8": 0.1})}
    assert versus_base_under_cut(no_curve, with_curve) is None


def test_report_prints_the_share_answered_under_a_cut_when_it_was_measured() -> None:
    shipped = json.loads((model_path("base") / "card.json").read_text())["eval"]
    rows = shipped["cut"]["tokens_per_op"]
    before = format_report(shipped)  # cards measured before `answered` existed still print
    assert "   8/op  " in before
    rows["8"]["answered"] = 0.975
    after = format_report(shipped)
    line = next(x for x in after.splitlines() if x.startswith("    8/op"))
    assert line.endswith("  0.975") and line not in before.splitlines()
