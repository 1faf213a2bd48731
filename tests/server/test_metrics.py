"""Metrics.record_final: tokens by phase, samples drawn, budget cut-ins (no engine)."""

from __future__ import annotations

from core.base import Choice, Result, Usage
from server.process.metrics import Metrics


def test_record_final_counts_phases_samples_and_cutins() -> None:
    m = Metrics()
    final = Result(
        choices=(
            Choice(
                index=0,
                reasoning="",
                content="",
                finish_reason="length",
                budget_cut=("thinking",),
            ),
            Choice(index=1, reasoning="", content="", finish_reason="stop", budget_cut=()),
            Choice(
                index=2,
                reasoning="",
                content="",
                finish_reason="length",
                budget_cut=("thinking", "solution"),
            ),
            Choice(index=3, reasoning="", content="", finish_reason="stop"),
        ),
        usage=Usage(prompt_tokens=7, completion_tokens=50, reasoning_tokens=30),
        samples=6,
    )
    m.record_final("elastic", final)
    text = m.render().decode()
    assert 'thinkgate_tokens_total{phase="thinking"} 30.0' in text
    assert 'thinkgate_tokens_total{phase="answer"} 20.0' in text
    assert "thinkgate_prompt_tokens_total 7.0" in text
    assert 'thinkgate_samples_total{strategy="elastic"} 6.0' in text
    assert 'thinkgate_budget_cutins_total{budget="thinking",strategy="elastic"} 1.0' in text
    assert (
        'thinkgate_budget_cutins_total{budget="thinking+solution",strategy="elastic"} 1.0' in text
    )
    assert 'budget="any"' not in text
    m.watch_engine(lambda: 3)
    assert "thinkgate_engine_unfinished_requests 3.0" in m.render().decode()
