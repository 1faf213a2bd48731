"""Answers as class labels: the vote, the warm-up pattern, and label pools.

Every PETS computation works on small integers: per question, answer classes are
numbered in order of first appearance (``strategies.answers.group_answers`` decides
equivalence), and ``None`` stands for "no answer extracted". ``None`` counts as an
outcome when allocating (it is something the model does) but never wins a vote.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from strategies.answers import AnswerGroup, group_answers

Label = int | None
K0: Final = 4  # warm-up samples of the online rule

# The five count patterns of four warm-up answers, most to least agreement.
PATTERNS: Final[tuple[str, ...]] = ("4", "3+1", "2+2", "2+1+1", "1+1+1+1")


def majority_label(labels: Sequence[Label]) -> Label:
    """The most frequent non-None label; a tie goes to the label seen first.

    None when no sample has an answer. This is the vote of every PETS path (online,
    offline, simulation and the consistency label of a pool), so all of them break
    ties the same way.
    """
    counts: Counter[int] = Counter(x for x in labels if x is not None)
    best: Label = None
    best_count = 0
    for x in labels:  # first appearance order; strict '>' keeps the earliest tie
        if x is not None and counts[x] > best_count:
            best, best_count = x, counts[x]
    return best


def pattern(labels: Sequence[Label]) -> str:
    """The sorted count pattern of warm-up labels, e.g. ``[3, 1, 3, 3] -> "3+1"``.

    ``None`` answers are counted as one class of their own.
    """
    return pattern_of_counts(Counter(labels).values())


def pattern_of_counts(counts: Iterable[int]) -> str:
    """``[1, 3] -> "3+1"``: class counts as a pattern name."""
    return "+".join(str(c) for c in sorted(counts, reverse=True))


def label_answers(
    answers: Sequence[str | None], *, exact: bool = False
) -> tuple[tuple[Label, ...], tuple[AnswerGroup, ...]]:
    """Class labels of extracted answers (group index, or None) and the groups;
    ``exact``: equal strings only (canonical JSON answers)."""
    groups = group_answers(answers, exact=exact)
    labels: list[Label] = [None] * len(answers)
    for g, group in enumerate(groups):
        for pos in group.members:
            labels[pos] = g
    return tuple(labels), groups
