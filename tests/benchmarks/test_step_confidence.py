"""The per-line reading of the step-confidence bench: which logprobs belong to a line."""

from __future__ import annotations

import pytest

from benchmarks.step_confidence import line_scores


def test_a_lines_tokens_run_to_its_tag_inclusive() -> None:
    # Prompt of 3 tokens; generated: line 1 = ids 3..5 (tag at 5), line 2 = 6..7 (tag at 7),
    # then </think> and an answer that is no line.
    logprobs = [-0.1, -0.2, -0.3, -1.0, -3.0, -0.5, -0.1]
    positions = (5, 7)
    assert line_scores(positions, 2, 3, logprobs, "mean") == pytest.approx([-0.2, -2.0])
    assert line_scores(positions, 2, 3, logprobs, "min") == pytest.approx([-0.3, -3.0])
    # The tag after </think> is not a thinking line.
    assert line_scores(positions, 1, 3, logprobs, "mean") == pytest.approx([-0.2])
