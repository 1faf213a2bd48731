"""server/pipeline/budgets.py: precedence, default strategies, and every refusal (no engine)."""

from __future__ import annotations

import pytest

from core.budget import Budget
from core.errors import InvalidBudget, InvalidRequest, UnknownStrategy
from server.pipeline.budgets import resolve
from server.settings import Settings

HONOURED = {
    "plain": frozenset(),
    "elastic": frozenset({"thinking", "solution"}),
    "self-consistency": frozenset({"samples", "thinking", "solution"}),
    "best-of-majority": frozenset({"samples", "k"}),
    "auto": frozenset({"thinking"}),
}


@pytest.fixture
def settings() -> Settings:
    return Settings(max_budget_tokens=1000, max_samples=32)


def test_nothing_set_is_plain_with_empty_budget(settings: Settings) -> None:
    assert resolve({}, {}, settings, honoured=HONOURED) == ("plain", Budget())
    assert Budget().header() == "none"


def test_header_beats_body_beats_effort(settings: Settings) -> None:
    body = {"budget": {"thinking": 20, "solution": 7}, "reasoning_effort": "high"}
    name, budget = resolve({"X-Budget-Thinking": "5"}, body, settings, honoured=HONOURED)
    assert (name, budget) == ("elastic", Budget(thinking=5, solution=7))
    name, budget = resolve({}, body, settings, honoured=HONOURED)
    assert budget.thinking == 20
    name, budget = resolve({}, {"reasoning_effort": "high"}, settings, honoured=HONOURED)
    assert budget.thinking == int(settings.effort_high * 512)


def test_header_names_are_case_insensitive(settings: Settings) -> None:
    _, budget = resolve({"x-budget-solution": "3", "X-BUDGET-THINKING": "4"}, {}, settings)
    assert budget == Budget(thinking=4, solution=3)


@pytest.mark.parametrize(
    ("effort", "setting"),
    [
        ("none", "effort_none"),
        ("minimal", "effort_minimal"),
        ("low", "effort_low"),
        ("medium", "effort_medium"),
        ("high", "effort_high"),
        ("xhigh", "effort_xhigh"),
        ("max", "effort_max"),
    ],
)
def test_effort_is_its_configured_share_of_the_models_context(effort: str, setting: str) -> None:
    settings = Settings.model_validate({setting: 0.25})
    body = {"reasoning_effort": effort}
    name, budget = resolve({}, body, settings, honoured=HONOURED, context=4096)
    assert (name, budget.thinking) == ("auto", 1024)  # an effort alone is auto's plan
    # Without a context given, the testbed's 512.
    assert resolve({}, body, settings)[1].thinking == 512 // 4


def test_effort_table_defaults_and_cap() -> None:
    from server.pipeline.effort import table

    assert table(Settings(), 512) == {
        "none": 0,
        "minimal": 16,
        "low": 48,
        "medium": 128,
        "high": 320,
        "xhigh": 384,
        "max": 448,
    }
    assert table(Settings(), 32768)["medium"] == 8192
    from server.pipeline.effort import EFFORT_SAMPLES, ceiling

    # The 2026 levels spend more samples as well as more thinking (an auto plan).
    assert [EFFORT_SAMPLES[e] for e in ("high", "xhigh", "max")] == [8, 12, 16]
    assert ceiling(Settings(), "max", 448) == 16 * (448 + 16 + 2)
    capped = Settings(max_budget_tokens=1000)
    assert table(capped, 131072)["high"] == 1000  # never over the server's cap (no 400)


def test_default_strategies_follow_the_budget(settings: Settings) -> None:
    assert resolve({}, {"budget": {"solution": 4}}, settings)[0] == "elastic"
    assert resolve({"X-Budget-Samples": "8"}, {}, settings)[0] == "self-consistency"
    assert resolve({"X-Budget-Samples": "1"}, {}, settings)[0] == "plain"
    custom = Settings(budget_strategy="budget-guidance", samples_strategy="best-of-n")
    # An effort alone is a whole plan (auto under the effort's ceiling)...
    name, budget = resolve({}, {"reasoning_effort": "low"}, custom)
    assert name == "auto" and budget.tokens == 2 * (budget.thinking + 16 + 2)
    # ... and beside another per-sample field it is a thinking budget, as before.
    both = {"reasoning_effort": "low", "budget": {"solution": 8}}
    name, budget = resolve({}, both, custom)
    assert name == "budget-guidance" and budget.tokens is None
    assert resolve({}, {"budget": {"samples": 3}}, custom)[0] == "best-of-n"


def test_named_strategy_wins_and_header_beats_body(settings: Settings) -> None:
    body = {"strategy": "elastic", "budget": {"samples": 4, "k": 2}}
    name, budget = resolve({"X-Strategy": "best-of-majority"}, body, settings, honoured=HONOURED)
    assert (name, budget) == ("best-of-majority", Budget(samples=4, k=2))


def test_server_defaults_fill_only_honoured_fields() -> None:
    settings = Settings(default_samples=5, default_thinking=64)
    name, budget = resolve({"X-Strategy": "best-of-majority"}, {}, settings, honoured=HONOURED)
    assert budget == Budget(samples=5)
    name, budget = resolve({}, {}, settings, honoured=HONOURED)
    assert (name, budget) == ("plain", Budget())


@pytest.mark.parametrize(
    ("headers", "body", "param"),
    [
        ({"X-Budget-Thinking": "-1"}, {}, "X-Budget-Thinking"),
        ({"X-Budget-Thinking": "1.5"}, {}, "X-Budget-Thinking"),
        ({"X-Budget-Thinking": "lots"}, {}, "X-Budget-Thinking"),
        ({"X-Budget-Thinking": ""}, {}, "X-Budget-Thinking"),
        ({"X-Budget-Solution": "1001"}, {}, "X-Budget-Solution"),
        ({"X-Budget-Samples": "0"}, {}, "X-Budget-Samples"),
        ({"X-Budget-Samples": "33"}, {}, "X-Budget-Samples"),
        ({}, {"budget": {"thinking": -3}}, "budget.thinking"),
        ({}, {"budget": {"thinking": 2.0}}, "budget.thinking"),
        ({}, {"budget": {"thinking": True}}, "budget.thinking"),
        ({}, {"budget": {"thinking": "12"}}, "budget.thinking"),
        ({}, {"budget": {"solution": 10**12}}, "budget.solution"),
        ({}, {"budget": {"k": 0}}, "budget.k"),
        ({}, {"budget": {"tokenz": 5}}, "budget.tokenz"),
        ({}, {"budget": {"tokens": 0}}, "budget.tokens"),
        ({"X-Budget-Deadline-Ms": "soon"}, {}, "X-Budget-Deadline-Ms"),
        ({"X-Budget-Deadline-Ms": "3600001"}, {}, "X-Budget-Deadline-Ms"),
        ({}, {"budget": {"thinking_min": 9, "thinking": 8}}, "budget.thinking_min"),
        ({}, {"budget": [5]}, "budget"),
        ({"X-Strategy": "best-of-majority"}, {"budget": {"samples": 2, "k": 3}}, "budget.k"),
    ],
)
def test_bad_budgets_name_their_param(
    settings: Settings, headers: dict[str, str], body: dict[str, object], param: str
) -> None:
    with pytest.raises(InvalidBudget) as info:
        resolve(headers, body, settings, honoured=HONOURED)
    assert info.value.param == param
    assert info.value.status == 400
    assert info.value.message


def test_unhonoured_field_is_refused_naming_its_source(settings: Settings) -> None:
    with pytest.raises(InvalidBudget) as info:
        resolve({"X-Strategy": "plain", "X-Budget-Thinking": "5"}, {}, settings, honoured=HONOURED)
    assert info.value.param == "X-Budget-Thinking"
    assert "plain" in info.value.message
    with pytest.raises(InvalidBudget) as info:
        resolve({}, {"strategy": "plain", "reasoning_effort": "low"}, settings, honoured=HONOURED)
    assert info.value.param == "reasoning_effort"
    with pytest.raises(InvalidBudget) as info:
        resolve({"X-Budget-K": "2"}, {}, settings, honoured=HONOURED)
    assert info.value.param == "X-Budget-K"


def test_unknown_strategy_names_header_or_body(settings: Settings) -> None:
    with pytest.raises(UnknownStrategy) as info:
        resolve({"X-Strategy": "magic"}, {}, settings, honoured=HONOURED)
    assert info.value.param == "X-Strategy"
    with pytest.raises(UnknownStrategy) as info:
        resolve({}, {"strategy": "magic"}, settings, honoured=HONOURED)
    assert info.value.param == "strategy"
    with pytest.raises(UnknownStrategy):
        resolve({}, {"strategy": 5}, settings, honoured=HONOURED)
    missing = {"plain": frozenset[str]()}  # elastic not installed: the default cannot run
    with pytest.raises(UnknownStrategy) as info:
        resolve({"X-Budget-Thinking": "3"}, {}, settings, honoured=missing)
    assert "elastic" in info.value.message


def test_bad_effort_is_invalid_request(settings: Settings) -> None:
    with pytest.raises(InvalidRequest) as info:
        resolve({}, {"reasoning_effort": "extreme"}, settings)
    assert info.value.param == "reasoning_effort"


def test_applied_header_format(settings: Settings) -> None:
    _, budget = resolve({"X-Budget-Thinking": "64", "X-Budget-Solution": "32"}, {}, settings)
    assert budget.header() == "thinking=64;solution=32"


def test_the_request_limits_choose_auto_and_every_strategy_honours_them(
    settings: Settings,
) -> None:
    name, budget = resolve({"X-Budget-Tokens": "300"}, {}, settings, honoured=HONOURED)
    assert name == "auto" and budget.tokens == 300
    name, budget = resolve({}, {"budget": {"deadline_ms": 2000}}, settings, honoured=HONOURED)
    assert name == "auto" and budget.deadline_ms == 2000
    # Named strategies take them whatever their own fields.
    name, budget = resolve(
        {"X-Strategy": "plain", "X-Budget-Deadline-Ms": "900"},
        {"budget": {"tokens": 64}},
        settings,
        honoured=HONOURED,
    )
    assert name == "plain" and (budget.tokens, budget.deadline_ms) == (64, 900)
    assert budget.header() == "tokens=64;deadline_ms=900"
    # A minimum is a thinking budget: it picks the budget strategy.
    name, budget = resolve({"X-Budget-Thinking-Min": "12"}, {}, settings)
    assert name == "elastic" and budget.thinking_min == 12
