from __future__ import annotations

import pytest

from testbed.task import (
    SPLITS,
    Question,
    evaluate,
    make_questions,
    parse_answer_for_eval,
    parse_prompt,
    split_of,
)


def test_evaluate_left_to_right_mod_10() -> None:
    assert evaluate("3+8-5+7") == 3
    assert evaluate("0-1") == 9
    assert evaluate("9+9+9") == 7
    with pytest.raises(ValueError):
        evaluate("3*4")


def test_prompt_format_and_parse() -> None:
    q = Question.from_expr("3+8-5+7")
    assert q == Question(expr="3+8-5+7", ops=3, answer=3)
    assert q.prompt == "Compute 3+8-5+7 mod 10."
    assert parse_prompt(q.prompt) == "3+8-5+7"
    assert parse_prompt(f"<|im_start|>user\n{q.prompt}<|im_end|>") == "3+8-5+7"
    with pytest.raises(ValueError):
        parse_prompt("What is 2+2?")


def test_make_questions_is_deterministic_and_seeded() -> None:
    a = make_questions("test", 50, seed=3)
    assert a == make_questions("test", 50, seed=3)
    assert a != make_questions("test", 50, seed=4)
    assert all(1 <= q.ops <= 12 for q in a)
    assert {q.ops for q in make_questions("train", 30, seed=0, min_ops=5, max_ops=5)} == {5}


def test_questions_stay_in_their_split() -> None:
    seen: dict[str, set[str]] = {}
    for split in SPLITS:
        qs = make_questions(split, 2000, seed=0)
        assert all(split_of(q.expr) == split for q in qs)
        assert all(evaluate(q.expr) == q.answer for q in qs)
        seen[split] = {q.expr for q in qs}
    assert not seen["train"] & seen["test"]
    assert not seen["train"] & seen["validation"]
    assert not seen["validation"] & seen["test"]


def test_split_sizes_roughly_80_10_10() -> None:
    import random

    from testbed.task import random_expr

    rng = random.Random(0)
    counts = {s: 0 for s in SPLITS}
    for _ in range(5000):
        counts[split_of(random_expr(rng, rng.randint(1, 12)))] += 1
    assert 0.07 < counts["test"] / 5000 < 0.13
    assert 0.07 < counts["validation"] / 5000 < 0.13


def test_unknown_split_and_bad_range() -> None:
    with pytest.raises(ValueError):
        make_questions("dev", 1, seed=0)
    with pytest.raises(ValueError):
        make_questions("test", 1, seed=0, min_ops=5, max_ops=2)


def test_answer_parser_for_eval() -> None:
    assert parse_answer_for_eval("\n\\boxed{3}") == 3
    assert parse_answer_for_eval("\\boxed{1} then \\boxed{7}") == 7
    assert parse_answer_for_eval("no answer") is None
    assert parse_answer_for_eval("\\boxed{12}") is None
