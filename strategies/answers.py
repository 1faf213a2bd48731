"""Answer tools shared by every strategy that aggregates answers (docs/specs.md §0).

Four functions, used in this order:

* :func:`extract_answer` -- the final answer of a response text: the last ``\\boxed{...}``
  (balanced braces), else an option letter ("the answer is (C)"), else the last number.
* :func:`normalize` -- a canonical string for cheap comparison (spacing, ``$``,
  ``\\left``/``\\right``, ``\\text{}``, ``\\dfrac``, a trailing period...).
* :func:`equivalent` -- symmetric equivalence: equal normalised strings, else
  ``math_verify.verify`` in **both** directions (it is not symmetric). Cached.
* :func:`group_answers` -- greedy clustering: each answer is compared with each group's
  representative in order, the first match wins, and the first answer seen represents
  its group. :func:`majority` picks the largest group, ties to the group seen first.

Extraction here is a small scanner on purpose (it has to find the *last* box and keep
its text for display); equivalence is math-verify's job, not ours.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Final

from math_verify import parse, verify

from strategies.tool_calls import KEY_PREFIX

_BOX_OPENERS: Final = ("\\boxed{", "\\fbox{")
_OPTION_RE: Final = re.compile(
    r"(?:answer|option|choice)\s*(?:is|:)?\s*[:\s]*\(?\s*([A-J])\s*\)?(?![A-Za-z])",
    re.IGNORECASE,
)
_BARE_OPTION_RE: Final = re.compile(r"^\s*\(?([A-J])\)?\s*\.?\s*$")
_LETTER_RE: Final = re.compile(r"^\(?([A-Ja-j])\)?$")
_NUMBER_RE: Final = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_DECIMAL_RE: Final = re.compile(r"^-?(?:\d+(?:\.\d*)?|\.\d+)$")
_TEXT_RE: Final = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")
# Spellings with no mathematical content: dropped before comparing.
_NOISE: Final = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "$")
_CACHE_SIZE: Final = 8192


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; None
    when there is none or the last one never closes."""
    start = max(text.rfind(opener) for opener in _BOX_OPENERS)
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
    return None


def extract_answer(text: str) -> str | None:
    """The final answer stated in ``text`` (the answer part of a response), or None.

    Tried in order: the last ``\\boxed{}``, an option letter (``Answer: C``,
    ``the answer is (B)``, or a text that is just a letter), the last number.
    """
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed or None
    options = _OPTION_RE.findall(text)
    if options:
        return str(options[-1]).upper()
    bare = _BARE_OPTION_RE.match(text)
    if bare:
        return bare.group(1).upper()
    numbers = _NUMBER_RE.findall(text)
    if numbers:
        return str(numbers[-1]).replace(",", "")
    return None


def normalize(answer: str) -> str:
    """Canonical spelling of an answer, for the exact-match fast path and for display."""
    s = answer.strip()
    s = _TEXT_RE.sub(r"\1", s)
    for noise in _NOISE:
        s = s.replace(noise, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = "".join(s.split())
    s = s.rstrip(".")
    # A single option letter, with or without parentheses, compares case-insensitively.
    letter = _LETTER_RE.match(s)
    if letter:
        return letter.group(1).upper()
    return s


def _timeout() -> int | None:
    # math-verify's timeout is signal.alarm, which only the main thread may set.
    return 5 if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=_CACHE_SIZE)
def _parsed(norm: str) -> tuple[object, ...]:
    return tuple(parse(f"${norm}$", parsing_timeout=_timeout()))


@lru_cache(maxsize=_CACHE_SIZE)
def _verified(a: str, b: str) -> bool:
    pa, pb = _parsed(a), _parsed(b)
    if not pa or not pb:
        return False
    timeout = _timeout()
    return bool(
        verify(list(pa), list(pb), timeout_seconds=timeout)
        or verify(list(pb), list(pa), timeout_seconds=timeout)
    )


def equivalent(a: str, b: str) -> bool:
    """Whether two answers are the same: symmetric, reflexive, cached.

    Equal normalised strings are equivalent without calling math-verify (the common
    case when samples agree), and two plain decimal numbers compare by value; otherwise
    ``verify(a, b) or verify(b, a)``.
    """
    na, nb = normalize(a), normalize(b)
    if na == nb:
        return True
    if not na or not nb:
        return False
    if _DECIMAL_RE.match(na) and _DECIMAL_RE.match(nb):
        return Decimal(na) == Decimal(nb)
    # Order the pair so (a, b) and (b, a) share one cache entry.
    return _verified(*sorted((na, nb)))


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerGroup:
    """One answer class: its representative (the first answer seen, normalised) and the
    positions of its members in the input, in input order."""

    answer: str
    members: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.members)


def group_answers(answers: Sequence[str | None], *, exact: bool = False) -> tuple[AnswerGroup, ...]:
    """Greedy clustering of ``answers`` into classes, in order of first appearance.

    ``None`` (no answer extracted) joins no group. O(N*G) equivalence checks, most of
    them string compares. ``exact``: equal strings only (canonical JSON answers); tool
    calls' keys (``strategies.tool_calls.KEY_PREFIX``) always compare so.
    """
    reps: list[str] = []
    members: list[list[int]] = []
    for pos, answer in enumerate(answers):
        if answer is None:
            continue
        verbatim = exact or answer.startswith(KEY_PREFIX)
        norm = answer if verbatim else normalize(answer)
        for g, rep in enumerate(reps):
            same = rep == norm if verbatim or rep.startswith(KEY_PREFIX) else equivalent(rep, norm)
            if same:
                members[g].append(pos)
                break
        else:
            reps.append(norm)
            members.append([pos])
    return tuple(
        AnswerGroup(answer=rep, members=tuple(m)) for rep, m in zip(reps, members, strict=True)
    )


def majority(groups: Sequence[AnswerGroup]) -> AnswerGroup | None:
    """The largest group; a tie goes to the group seen first. None for no groups."""
    best: AnswerGroup | None = None
    for group in groups:  # strict '>' keeps the earliest of equal counts
        if best is None or group.count > best.count:
            best = group
    return best
