"""The fit/test split of a workload: by a hash of each question, never by its line.

A question is in the test part when the first 8 hex digits of the SHA-256 of
``"thinkgate-split:" + id``, read as a fraction of 2^32, fall below the test share. The
rule does not depend on the file's order or on the other questions, so adding lines to a
workload moves no question from one part to the other, and the two parts never overlap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

RULE: Final = (
    "test when int(sha256('thinkgate-split:' + question_id).hexdigest()[:8], 16) / 2**32 "
    "< test_share; question_id = sha256 of the messages as canonical JSON, first 16 hex"
)

Q = TypeVar("Q", bound="HasId")


class HasId(Protocol):
    @property
    def id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Split:
    test_share: float
    fit_ids: tuple[str, ...]
    test_ids: tuple[str, ...]


def in_test(question_id: str, test_share: float) -> bool:
    digest = hashlib.sha256(f"thinkgate-split:{question_id}".encode()).hexdigest()
    return int(digest[:8], 16) / 2**32 < test_share


def split(questions: Sequence[Q], test_share: float) -> tuple[list[Q], list[Q]]:
    """(fit part, test part) of ``questions``, each in the file's order."""
    if not 0.0 < test_share < 1.0:
        raise ValueError(f"test share is between 0 and 1, not {test_share}")
    fit = [q for q in questions if not in_test(q.id, test_share)]
    test = [q for q in questions if in_test(q.id, test_share)]
    return fit, test


def record(fit: Sequence[HasId], test: Sequence[HasId], test_share: float) -> Split:
    return Split(test_share, tuple(q.id for q in fit), tuple(q.id for q in test))
