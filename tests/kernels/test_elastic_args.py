from __future__ import annotations

import pytest

from kernels.elastic import args
from kernels.elastic.args import ElasticArgs, parse

BASE = {args.THINKING_BUDGET: 8, args.THINK_END_ID: 4, args.EOS_ID: 2}


def test_absent_means_not_opted_in() -> None:
    assert parse(None) is None
    assert parse({}) is None
    assert parse({"other_processor_key": "x"}) is None


def test_full_and_defaults() -> None:
    assert parse(BASE) == ElasticArgs(
        thinking_budget=8, solution_budget=None, think_end_id=4, eos_id=2, thinking_open=True
    )
    full = {**BASE, args.SOLUTION_BUDGET: 0, args.THINKING_OPEN: 0}
    assert parse(full) == ElasticArgs(
        thinking_budget=8, solution_budget=0, think_end_id=4, eos_id=2, thinking_open=False
    )
    assert parse({**BASE, args.THINKING_BUDGET: 0}) is not None


def test_key_names_are_stable() -> None:
    # strategies/ and HTTP clients (vllm_xargs) depend on these exact strings.
    assert args.KEYS == (
        "thinkgate_thinking_budget",
        "thinkgate_solution_budget",
        "thinkgate_think_end_id",
        "thinkgate_eos_id",
        "thinkgate_thinking_open",
        "thinkgate_think_end_ids",
        "thinkgate_thinking_min",
        "thinkgate_think_deadline",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (args.THINKING_BUDGET, -1),
        (args.THINKING_BUDGET, "5"),
        (args.THINKING_BUDGET, True),
        (args.THINKING_BUDGET, 5.0),
        (args.THINKING_BUDGET, 1_000_001),
        (args.SOLUTION_BUDGET, -3),
        (args.SOLUTION_BUDGET, "7"),
        (args.SOLUTION_BUDGET, False),
        (args.THINK_END_ID, -1),
        (args.THINK_END_ID, "4"),
        (args.EOS_ID, 2**31),
        (args.THINKING_OPEN, 2),
        (args.THINKING_OPEN, True),
        (args.THINKING_MIN, -1),
        (args.THINKING_MIN, "3"),
        (args.THINK_DEADLINE, "1700000000"),
        (args.THINK_DEADLINE, True),
        (args.THINK_DEADLINE, float("nan")),
        (args.THINK_DEADLINE, -1.0),
    ],
)
def test_bad_values_name_the_key(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=key):
        parse({**BASE, key: value})


@pytest.mark.parametrize("missing", [args.THINK_END_ID, args.EOS_ID])
def test_ids_required_with_a_budget(missing: str) -> None:
    extra = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ValueError, match=missing):
        parse(extra)


def test_solution_budget_alone_is_refused() -> None:
    with pytest.raises(ValueError, match=args.THINKING_BUDGET):
        parse({args.SOLUTION_BUDGET: 4, args.THINK_END_ID: 4, args.EOS_ID: 2})


def test_minimum_and_deadline_parse() -> None:
    got = parse({**BASE, args.THINKING_MIN: 2, args.THINK_DEADLINE: 1_800_000_000.25})
    assert got is not None
    assert got.thinking_min == 2 and got.think_deadline == 1_800_000_000.25
    plain = parse(BASE)
    assert plain is not None and plain.thinking_min == 0 and plain.think_deadline is None


def test_a_minimum_above_the_budget_is_refused() -> None:
    t = BASE[args.THINKING_BUDGET]
    assert isinstance(t, int)
    with pytest.raises(ValueError, match=args.THINKING_MIN):
        parse({**BASE, args.THINKING_MIN: t + 1})
