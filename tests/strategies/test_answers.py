"""Answer tools: extraction, normalisation, symmetric equivalence, greedy grouping."""

from __future__ import annotations

import pytest

from strategies.answers import (
    equivalent,
    extract_answer,
    group_answers,
    last_boxed,
    majority,
    normalize,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{3}", "3"),
        ("\\boxed{1} then \\boxed{7}", "7"),  # the last box wins
        ("\\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),  # nested braces stay balanced
        ("\\fbox{x+1}", "x+1"),
        ("The answer is (C).", "C"),
        ("Answer: b", "B"),
        ("(D)", "D"),
        ("total 1,250 apples, i.e. 12 boxes", "12"),
        ("-0.5", "-0.5"),
        ("no answer here", None),
        ("\\boxed{3", "3"),  # a box cut by the solution budget: its number still counts
        ("", None),
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


def test_last_boxed_handles_empty_box() -> None:
    assert last_boxed("\\boxed{}") == ""
    assert extract_answer("\\boxed{}") is None


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        (" 3 ", "3"),
        ("$3$", "3"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\text{(b)}", "B"),
        ("5.", "5"),
    ],
)
def test_normalize(raw: str, norm: str) -> None:
    assert normalize(raw) == norm


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1/2", "0.5"),
        ("\\frac{1}{2}", "0.5"),
        ("3", "3.0"),
        ("3", "3.00"),  # the decimal fast path
        (".5", "0.5"),
        ("x+1", "1+x"),
        ("(A)", "a"),
    ],
)
def test_equivalent_is_symmetric_on_equal_values(a: str, b: str) -> None:
    assert equivalent(a, b)
    assert equivalent(b, a)


@pytest.mark.parametrize(
    ("a", "b"), [("2", "3"), ("3", "30"), ("1/2", "0.6"), ("A", "B"), ("x", "x+1")]
)
def test_not_equivalent(a: str, b: str) -> None:
    assert not equivalent(a, b)
    assert not equivalent(b, a)


def test_equivalence_uses_both_directions() -> None:
    # math_verify.verify(gold, target) is not symmetric for sets vs. intervals and the
    # like; whatever one direction says, ours must agree in both orders.
    pairs = [("\\{1,2\\}", "\\{2,1\\}"), ("[0,1]", "(0,1)"), ("3", "\\{3\\}")]
    for a, b in pairs:
        assert equivalent(a, b) == equivalent(b, a)


def test_group_answers_first_seen_is_representative() -> None:
    groups = group_answers(["0.5", "3", None, "1/2", "\\frac{1}{2}", "3.0", "7"])
    assert [g.answer for g in groups] == ["0.5", "3", "7"]
    assert [g.members for g in groups] == [(0, 3, 4), (1, 5), (6,)]


def test_majority_ties_go_to_first_seen() -> None:
    groups = group_answers(["4", "2", "2", "4", "9"])
    best = majority(groups)
    assert best is not None and best.answer == "4"
    assert majority(group_answers(["1", "2", "2"])) == group_answers(["1", "2", "2"])[1]
    assert majority(()) is None
