"""Which of our names a client probably meant: a body field a few edits from one of
thinkgate's names (a strategy option, ``budget``, a vLLM sampling field) is a misspelling
to refuse, while any other unknown field is a client's or platform's own, to ignore."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# Fields that carry thinkgate's name are ours whatever follows it.
PREFIXES: Final = ("thinkgate", "x_thinkgate")


def _folded(name: str) -> str:
    """Case, ``_`` and ``-`` aside: ``voteStop``, ``vote-stop`` and ``vote_stop`` are one."""
    return name.lower().replace("_", "").replace("-", "")


def _distance(a: str, b: str, limit: int) -> int:
    """Edits from ``a`` to ``b`` (insert, delete, replace, or swap two neighbours: the
    optimal string alignment distance), or ``limit + 1`` once it is past ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(
                rows[-1][j] + 1,
                row[j - 1] + 1,
                rows[-1][j - 1] + (a[i - 1] != b[j - 1]),
            )
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        if min(row) > limit:
            return limit + 1
        rows.append(row)
    return rows[-1][-1]


def nearest(field: str, names: Iterable[str]) -> str | None:
    """The name of ``names`` that ``field`` misspells (at most one edit for a name of up to
    five letters, two for longer ones, after folding case and separators), or None."""
    folded = _folded(field)
    best: tuple[int, str] | None = None
    for name in sorted(set(names)):
        target = _folded(name)
        limit = 1 if len(target) <= 5 else 2
        d = _distance(folded, target, limit)
        if d <= limit and (best is None or d < best[0]):
            best = (d, name)
    return None if best is None else best[1]


def has_our_prefix(field: str) -> bool:
    return field.lower().replace("-", "_").startswith(PREFIXES)
