"""How a workload question's reply is graded: the answer read from the reply, and when two
answers are the same.

``math`` (the default) reads the answer as the vote does (``thinkgate.answer``, else
``strategies.answers.extract_answer`` on the reply) and compares with math-verify's
equivalence; ``number`` compares values (``1,000`` and ``1000.0`` are one); ``choice``
reads an option letter; ``exact`` compares the stripped text; ``{"regex": P}`` reads the
first group of ``P`` (the whole match without a group) from the reply and compares it
exactly. A label-free workload groups answers with the same rule (its consensus).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

from strategies.answers import equivalent, extract_answer

KINDS: Final = ("math", "number", "choice", "exact")
_NUMBER_RE: Final = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_LETTER_RE: Final = re.compile(r"\(?\b([A-J])\b\)?")


class GraderError(ValueError):
    """A grader that is not one of ``KINDS`` or a valid ``{"regex": ...}``."""


@dataclass(frozen=True, slots=True)
class Grader:
    kind: str = "math"  # one of KINDS, or "regex"
    pattern: str | None = None  # the regex grader's pattern

    @classmethod
    def parse(cls, raw: object) -> Grader:
        if isinstance(raw, str) and raw in KINDS:
            return cls(raw)
        if isinstance(raw, dict) and set(raw) == {"regex"} and isinstance(raw["regex"], str):
            try:
                re.compile(raw["regex"])
            except re.error as exc:
                raise GraderError(f"grader regex does not compile ({exc})") from exc
            return cls("regex", raw["regex"])
        raise GraderError(f'grader is one of {", ".join(KINDS)} or {{"regex": ...}}, not {raw!r}')

    def as_json(self) -> object:
        return self.kind if self.pattern is None else {"regex": self.pattern}

    def read(self, reply: str, stated: str | None = None) -> str | None:
        """The answer of a reply (``stated``: the answer the server read, its
        ``thinkgate.answer``), None when there is none."""
        if self.kind == "regex":
            found = re.search(self.pattern or "", reply)
            if found is None:
                return None
            return (found.group(1) if found.re.groups else found.group(0)).strip()
        if self.kind == "exact":
            return reply.strip() or None
        text = stated if stated is not None else extract_answer(reply)
        if self.kind == "number":
            numbers = _NUMBER_RE.findall(text if text is not None else reply)
            return numbers[-1].replace(",", "") if numbers else None
        if self.kind == "choice":
            letters = _LETTER_RE.findall(text if text is not None else reply)
            return letters[-1].upper() if letters else None
        return text

    def same(self, a: str, b: str) -> bool:
        """Whether two answers (read by :meth:`read`, or a question's label) agree."""
        if self.kind == "math":
            return equivalent(a, b)
        if self.kind == "number":
            x, y = _number(a), _number(b)
            return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-6)
        if self.kind == "choice":
            return a.strip().strip("()").upper() == b.strip().strip("()").upper()
        return a.strip() == b.strip()


def _number(text: str) -> float | None:
    try:
        return float(text.strip().replace(",", "").rstrip("."))
    except ValueError:
        return None
