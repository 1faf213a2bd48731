"""The option readers every strategy uses (core/options.py): one rule per kind, a 400
naming the field for a bad value, the default for an absent or null one."""

from __future__ import annotations

import math

import pytest

from core import options
from core.errors import InvalidRequest


def _bad(fn: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(InvalidRequest) as info:
        fn(*args, **kwargs)  # type: ignore[operator]
    assert info.value.param == args[1]
    return info.value.message


def test_integers_refuse_booleans_floats_and_values_out_of_range() -> None:
    assert options.integer({}, "k", 3) == 3
    assert options.integer({"k": None}, "k", None) is None
    assert options.integer({"k": 5}, "k", 3, hi=5) == 5
    for bad in (True, 2.0, "2", 0, 6, [1]):
        msg = _bad(options.integer, {"k": bad}, "k", 3, hi=5)
        assert msg.startswith("k must be an integer in [1, 5]")
    assert "k must be an integer >= 1" in _bad(options.integer, {"k": -1}, "k", None)


def test_numbers_are_finite_and_bounded_open_or_closed() -> None:
    assert options.number({"x": 1}, "x", 0.5, lo=0.0, hi=1.0, lo_open=True) == 1.0
    assert options.number({}, "x", None) is None
    assert "x must be in (0, 1], got 0" in _bad(
        options.number, {"x": 0}, "x", 0.5, lo=0.0, hi=1.0, lo_open=True
    )
    assert options.number({"x": 0}, "x", 0.5, lo=0.0, hi=1.0) == 0.0
    for bad in (math.nan, math.inf, False, "1"):
        assert "x must be a number >= 1" in _bad(options.number, {"x": bad}, "x", None, lo=1.0)
    assert "x must be a number, got" in _bad(options.number, {"x": "a"}, "x", 2.0)


def test_choices_flags_and_texts() -> None:
    assert options.choice({}, "c", "a", ("a", "b")) == "a"
    assert options.choice({"c": "b"}, "c", "a", ("a", "b")) == "b"
    assert "c must be one of a, b, got 'z'" in _bad(
        options.choice, {"c": "z"}, "c", "a", ("a", "b")
    )
    assert options.flag({"f": False}, "f", True) is False
    assert "f must be true or false" in _bad(options.flag, {"f": 1}, "f", True)
    assert options.text({}, "t", "\n") == "\n"
    assert "t must be a non-empty string" in _bad(options.text, {"t": ""}, "t", "\n")
