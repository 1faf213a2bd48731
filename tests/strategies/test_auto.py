"""``auto``'s choice: the documented rule, the calibrated table, the shipped table, and
the benchmark's envelope (fast: no engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_reasoning_sequences import CharTokens

from benchmarks.budgets import envelope
from core.allowance import Allowance, Limits
from core.base import Resources, StrategyContext, StrategyRequest
from core.budget import Budget
from core.engine import SamplingConfig
from core.registry import REGISTRY_KEY, Registry
from engines.scripted import ScriptedEngine
from server.calibrate.plans import Outcome, summary
from strategies.auto import (
    DEFAULT_TABLE,
    MAX_SAMPLES,
    TABLE_KEY,
    AutoTable,
    Means,
    PlanRow,
    accuracy_interval,
    choose,
    rule_plan,
    table_plan,
)
from strategies.prm import RESOURCE_KEY as PRM_KEY
from strategies.prm import ProcessRewardModel


def _means(**kw: object) -> Means:
    base: dict[str, object] = {
        "tokens": None,
        "seconds": None,
        "seconds_per_token": 0.004,
        "answer": 18,
        "room": 480,
        "free_rows": 64,
        "load": 0.0,
    }
    return Means(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("tokens", [18, 40, 100, 300, 1000, 3000, 100_000])
def test_the_rules_plan_fits_the_ceiling_with_an_answer_each(tokens: int) -> None:
    plan = rule_plan(_means(tokens=tokens))
    assert plan.samples * (plan.thinking + 18) <= max(tokens, 18)
    assert plan.samples <= MAX_SAMPLES and plan.source == "rule"
    if plan.samples == 1:
        assert plan.strategy == "elastic"
    else:
        assert plan.strategy == "self-consistency" and plan.samples >= 3


def test_the_rule_votes_when_tokens_allow_and_thinks_alone_when_not() -> None:
    assert rule_plan(_means(tokens=60)).strategy == "elastic"
    big = rule_plan(_means(tokens=3000))
    assert big.strategy == "self-consistency" and big.samples == MAX_SAMPLES


def test_a_deadline_bounds_each_samples_length_and_the_rows() -> None:
    # 0.4 s at 4 ms a token: 100 tokens a sample; 5 free rows: 5 samples.
    plan = rule_plan(_means(seconds=0.4, free_rows=5))
    assert plan.samples == 5 and plan.thinking == 100 - 18
    # Too little time for a vote's thought: one sample with what there is.
    alone = rule_plan(_means(seconds=0.1, free_rows=1))
    assert alone.strategy == "elastic" and alone.thinking == 25 - 18


TABLE = AutoTable(
    model="m",
    rows=(
        PlanRow(strategy="elastic", samples=1, thinking=64, accuracy=0.5, tokens=80, seconds=0.3),
        PlanRow(
            strategy="self-consistency",
            samples=8,
            thinking=64,
            accuracy=0.8,
            tokens=600,
            seconds=1.2,
        ),
        PlanRow(
            strategy="self-consistency",
            samples=4,
            thinking=128,
            accuracy=0.7,
            tokens=500,
            seconds=0.9,
        ),
    ),
)


def test_the_table_gives_the_most_accurate_plan_that_fits() -> None:
    assert table_plan(TABLE, _means(tokens=3000)).samples == 8  # type: ignore[union-attr]
    # 600 x 1.2 > 600: the next best that fits (500 x 1.2 = 600).
    fits = table_plan(TABLE, _means(tokens=600))
    assert fits is not None and (fits.samples, fits.thinking) == (4, 128)
    assert fits.expected_accuracy == 0.7 and fits.source == "table"
    assert table_plan(TABLE, _means(tokens=50)) is None  # none fits: the rule decides
    # Under load the measured seconds stretch: 1.2 s x (1 + 0.5) > 1.5 s.
    loaded = table_plan(TABLE, _means(seconds=1.5, load=0.5))
    assert loaded is not None and loaded.samples == 4
    # Not enough free rows for eight samples side by side.
    assert table_plan(TABLE, _means(seconds=10.0, free_rows=4)).samples == 4  # type: ignore[union-attr]


def test_a_table_round_trips_through_json(tmp_path: Path) -> None:
    import json

    path = tmp_path / "t.json"
    path.write_text(json.dumps({**TABLE.as_json(), "calibration": {"split": "validation"}}))
    assert AutoTable.load(path) == TABLE


def test_the_shipped_table_is_the_testbeds_and_calibrated_on_validation() -> None:
    import json

    data = json.loads(DEFAULT_TABLE.read_text())
    table = AutoTable.load(DEFAULT_TABLE)
    assert table.model == "testbed-base" and len(table.rows) >= 20
    assert data["calibration"]["split"] == "validation"
    assert all(0.0 <= r.accuracy <= 1.0 and r.seconds > 0 for r in table.rows)


def test_the_envelope_is_the_best_plan_that_fits() -> None:
    grid = {
        "a": summary([Outcome(True, True, 90, 0.1), Outcome(False, True, 110, 0.1)]),
        "b": summary([Outcome(True, True, 300, 0.2), Outcome(True, True, 280, 0.2)]),
    }
    assert envelope(grid, 100) == (None, 0.0)  # a's largest usage is 110
    assert envelope(grid, 200) == ("a", 0.5)
    assert envelope(grid, 300) == ("b", 1.0)
    late = summary([Outcome(True, True, 10, 3.0, late=True)], deadline_s=1.0)
    assert late["accuracy"] == 0.0 and late["on_time"] == 0.0


def test_wilson_interval() -> None:
    lo, hi = accuracy_interval(20, 24)
    assert 0.6 < lo < 0.7 and 0.9 < hi < 0.97


def _row(
    strategy: str,
    samples: int,
    accuracy: float,
    deadline_s: float | None,
    clients: int = 1,
    thinking: int | None = 128,
    tokens: float = 300.0,
) -> PlanRow:
    return PlanRow(
        strategy=strategy,
        samples=samples,
        thinking=thinking,
        accuracy=accuracy,
        tokens=tokens,
        seconds=0.9 if deadline_s is None else deadline_s,
        deadline_s=deadline_s,
        clients=clients,
    )


TIMED = AutoTable(
    model="m",
    rows=(
        _row("elastic", 1, 0.6, None, thinking=64, tokens=80),  # 0.9 s alone, unlimited
        _row("deepconf", 8, 0.55, 1.0, thinking=None),
        _row("elastic", 1, 0.2, 1.0),
        _row("deepconf", 8, 0.9, 2.0, thinking=None, tokens=500),
        _row("self-consistency", 4, 0.8, 2.0, tokens=400),
        _row("elastic", 1, 0.7, 2.0, clients=8),
        _row("self-consistency", 4, 0.3, 2.0, clients=8, tokens=400),
    ),
)


def test_under_a_deadline_the_rows_measured_with_one_decide() -> None:
    # 2.3 s covers the 2 s bucket: its best row, though 0.9 s alone might fit as well.
    plan = table_plan(TIMED, _means(seconds=2.2, deadline=2.3))
    assert plan is not None and (plan.strategy, plan.samples) == ("deepconf", 8)
    assert plan.thinking is None and "2 s deadline" in plan.reason
    # A few ms lost in the queue keep the bucket (1.9 s of a 2 s deadline).
    assert table_plan(TIMED, _means(seconds=1.8, deadline=1.97)).strategy == "deepconf"  # type: ignore[union-attr]
    # 1.5 s: the 1 s bucket, where the measured cut leaves deepconf ahead.
    one = table_plan(TIMED, _means(seconds=1.4, deadline=1.5))
    assert one is not None and one.expected_accuracy == 0.55
    # Shorter than every calibrated deadline: the unlimited rows that fit in time.
    short = table_plan(TIMED, _means(seconds=0.92, deadline=0.93))
    assert short is not None and short.thinking == 64 and "calibrated plan" in short.reason
    # None fits 0.6 s uncut: the plans measured under the tightest deadline (1 s), not
    # the rule, which would spread 0.6 s over many samples.
    tight = table_plan(TIMED, _means(seconds=0.5, deadline=0.6))
    assert tight is not None and (tight.strategy, tight.expected_accuracy) == ("deepconf", 0.55)
    assert "tightest, 1 s" in tight.reason
    crowded = table_plan(TIMED, _means(seconds=0.5, deadline=0.6, crowd=8))
    assert crowded is not None and crowded.strategy == "elastic"  # the 2 s rows at 8
    # No deadline row fits the ceiling either: the rule decides.
    assert table_plan(TIMED, _means(seconds=0.5, deadline=0.6, tokens=10)) is None


def test_the_crowd_picks_the_rows_measured_at_its_load() -> None:
    # Eight requests in flight: the rows measured at 8, where one sample beats the vote.
    busy = table_plan(TIMED, _means(seconds=2.2, deadline=2.3, crowd=8))
    assert busy is not None and (busy.strategy, busy.expected_accuracy) == ("elastic", 0.7)
    # Nearest by ratio: 2 is nearer 1 than 8, 4 nearer 8.
    assert table_plan(TIMED, _means(seconds=2.2, deadline=2.3, crowd=2)).strategy == "deepconf"  # type: ignore[union-attr]
    assert table_plan(TIMED, _means(seconds=2.2, deadline=2.3, crowd=4)).strategy == "elastic"  # type: ignore[union-attr]


def test_a_ceiling_and_an_effort_cap_still_hold_under_a_deadline() -> None:
    # deepconf's 500 tokens x 1.2 do not fit 550: self-consistency's 400 do.
    capped = table_plan(TIMED, _means(seconds=2.2, deadline=2.3, tokens=550))
    assert capped is not None and capped.strategy == "self-consistency"
    # An effort's thinking cap: a row with uncapped thinking cannot honour it.
    effort = table_plan(TIMED, _means(seconds=2.2, deadline=2.3, thinking_cap=200))
    assert effort is not None and effort.strategy == "self-consistency"


def test_deadline_rows_round_trip_through_json(tmp_path: Path) -> None:
    import json

    path = tmp_path / "t.json"
    path.write_text(json.dumps(TIMED.as_json()))
    assert AutoTable.load(path) == TIMED


def test_calibrating_some_deadlines_keeps_the_other_rows_with_their_question_counts(
    tmp_path: Path,
) -> None:
    from server.calibrate.auto import _kept

    rows = [
        {
            "strategy": "plain",
            "samples": 1,
            "thinking": None,
            "accuracy": 0.5,
            "tokens": 9.0,
            "seconds": 0.3,
        },
        {
            "strategy": "plain",
            "samples": 1,
            "thinking": None,
            "accuracy": 0.1,
            "tokens": 9.0,
            "seconds": 0.3,
            "deadline_s": 0.5,
        },
        {
            "strategy": "plain",
            "samples": 1,
            "thinking": None,
            "accuracy": 0.7,
            "tokens": 9.0,
            "seconds": 0.3,
            "deadline_s": 2.0,
            "clients": 8,
        },
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"model": "m", "questions": 24, "rows": rows}))
    kept = _kept(path, ["deadlines"], (0.5, 1.0))
    assert [(r.get("deadline_s"), r["questions"]) for r in kept] == [(None, 24), (2.0, 24)]
    assert [r.get("deadline_s") for r in _kept(path, ["ceilings"])] == [0.5, 2.0]
    table = AutoTable(model="m", rows=tuple(PlanRow(**r) for r in kept), questions=96)
    path.write_text(json.dumps(table.as_json()))
    assert AutoTable.load(path) == table
    assert {r.questions for r in AutoTable.load(path).rows} == {24}


def test_auto_leaves_out_plans_whose_strategy_needs_a_resource_not_attached() -> None:
    # The deadline bucket's best row is a step search: chosen only where a PRM is attached.
    tokens = CharTokens()
    table = AutoTable(
        model="m",
        rows=(
            _row("step-rejection", 4, 0.5, 1.0),
            _row("self-consistency", 4, 0.3, 1.0),
        ),
    )
    registry = Registry()
    registry.load_entry_points(allow={"step-rejection", "self-consistency"})
    registry.instantiate()
    assert registry.needs_of("step-rejection") == (PRM_KEY,)
    assert registry.needs_of("self-consistency") == ()

    def strategy_under(items: dict[str, object]) -> str:
        ctx = StrategyContext(
            engine=ScriptedEngine(lambda request: iter(()), tokens=tokens),
            request=StrategyRequest(
                request_id="r",
                prompt_token_ids=tuple(tokens.encode("q\n<think>")),
                thinking_open=True,
                n=1,
                sampling=SamplingConfig(),
                budget=Budget(),
                stream=False,
            ),
            resources=Resources(
                items={TABLE_KEY.name: table, REGISTRY_KEY.name: registry, **items}
            ),
            allowance=Allowance(limits=Limits(deadline=1.2), clock=lambda: 0.0),
        )
        return choose(ctx)[0].strategy

    assert strategy_under({}) == "self-consistency"
    scorer = ScriptedEngine(lambda request: iter(()), tokens=tokens)
    prm = ProcessRewardModel(model=scorer, step_tag_id=0)  # type: ignore[arg-type]
    assert strategy_under({PRM_KEY.name: prm}) == "step-rejection"
