"""Reading a strategy's body options into typed values, one rule per kind.

A request's strategy options arrive as JSON values under their field names
(``StrategyRequest.options``). Each strategy reads them once into its own frozen
dataclass (``VoteOptions``, ``SearchOptions``, ``OnlinePlan``...) through these readers,
so every option of a kind is checked the same way: JSON ``true`` is never an integer,
a float is never an integer, ``NaN`` and infinities are never numbers, and a bad value
is an ``InvalidRequest`` (400) naming its field, raised before any engine call. An
absent option (or JSON ``null``) takes the default.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import overload

from core.errors import InvalidRequest

Options = Mapping[str, object]


def _range(lo: float | None, hi: float | None, lo_open: bool) -> str:
    if hi is None:
        return f"{'>' if lo_open else '>='} {lo:g}" if lo is not None else ""
    if lo is None:
        return f"<= {hi:g}"
    return f"in {'(' if lo_open else '['}{lo:g}, {hi:g}]"


@overload
def integer(
    options: Options, name: str, default: int, *, lo: int = 1, hi: int | None = None
) -> int: ...
@overload
def integer(
    options: Options, name: str, default: None, *, lo: int = 1, hi: int | None = None
) -> int | None: ...
def integer(
    options: Options, name: str, default: int | None, *, lo: int = 1, hi: int | None = None
) -> int | None:
    """An integer in ``[lo, hi]`` (``hi`` None: no upper bound)."""
    value = options.get(name)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < lo
        or (hi is not None and value > hi)
    ):
        raise InvalidRequest(
            f"{name} must be an integer {_range(lo, hi, False)}, got {value!r}", param=name
        )
    return value


@overload
def number(
    options: Options,
    name: str,
    default: float,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
) -> float: ...
@overload
def number(
    options: Options,
    name: str,
    default: None,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
) -> float | None: ...
def number(
    options: Options,
    name: str,
    default: float | None,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
) -> float | None:
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``; None: unbounded)."""
    value = options.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        bounds = _range(lo, hi, lo_open)
        raise InvalidRequest(
            f"{name} must be a number{' ' + bounds if bounds else ''}, got {value!r}", param=name
        )
    below = lo is not None and (value <= lo if lo_open else value < lo)
    if below or (hi is not None and value > hi):
        raise InvalidRequest(f"{name} must be {_range(lo, hi, lo_open)}, got {value!r}", param=name)
    return float(value)


def choice(options: Options, name: str, default: str, allowed: Collection[str]) -> str:
    """One of ``allowed``."""
    value = options.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or value not in allowed:
        raise InvalidRequest(
            f"{name} must be one of {', '.join(allowed)}, got {value!r}", param=name
        )
    return value


def flag(options: Options, name: str, default: bool) -> bool:
    """JSON ``true`` or ``false``."""
    value = options.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be true or false, got {value!r}", param=name)
    return value


def text(options: Options, name: str, default: str) -> str:
    """A non-empty string."""
    value = options.get(name)
    if value is None:
        return default
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{name} must be a non-empty string, got {value!r}", param=name)
    return value
