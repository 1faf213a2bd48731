"""The base recipe's gate decodes for real (transformers, in process) and tells models apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import model_path
from testbed.gate import GATE_ACCURACY, GATE_MAX_OPS, GATE_MIN_OPS, gate_questions, greedy_check
from testbed.task import make_questions
from testbed.train import TrainSettings, train_causal

pytestmark = pytest.mark.slow


def test_gate_questions_are_long_validation_questions() -> None:
    questions = gate_questions(per_ops=5)
    assert len(questions) == 5 * (GATE_MAX_OPS - GATE_MIN_OPS + 1)
    assert {q.ops for q in questions} == set(range(GATE_MIN_OPS, GATE_MAX_OPS + 1))
    test = {q.expr for q in make_questions("test", 2000, seed=0, min_ops=9)}
    assert not test & {q.expr for q in questions}


def test_shipped_base_passes_its_gate_and_an_untrained_model_fails(tmp_path: Path) -> None:
    shipped = greedy_check(model_path("base"))
    assert shipped.passed and shipped.accuracy >= GATE_ACCURACY, shipped
    untrained = tmp_path / "untrained"
    train_causal(
        TrainSettings(variant="base", max_steps=1, batch_size=2, compile=False),
        untrained,
        progress_bar=False,
    )
    check = greedy_check(untrained, per_ops=2)
    assert not check.passed and check.accuracy < 0.5, check
    assert check.as_dict()["passed"] is False and check.questions == 8
