"""Selection rules over answer classes: majority, Best-of-N, Best-of-Majority (pass@k).

Pure functions over values (docs/specs.md §3 and §5); the strategies draw the
samples and score them, these decide. Ties always go to the class seen first, so a
result depends on sample order only through ties.

* majority: top-k classes by count.
* Best-of-N (answer level, as PassAtK's baseline): top-k classes by mean reward.
* Best-of-Majority: keep classes with frequency ``count / N >= alpha``, then top-k of
  those by mean reward. ``alpha = 0`` is Best-of-N. When no class passes the filter
  the paper defines nothing; we fall back to majority and say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from strategies.answers import group_answers

Rule = Literal["majority", "best-of-n", "best-of-majority", "weighted-majority"]
FALLBACK_EMPTY_FILTER: Final = "no answer class reached the frequency threshold alpha"


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerClass:
    """An answer class over a pool of samples.

    ``members`` are sample positions in the pool, in pool order; ``rewards`` the
    members' scores in the same order (empty when nothing was scored). ``first_seen``
    is the class's rank by first appearance, the tie-breaker of every rule.
    """

    answer: str
    members: tuple[int, ...]
    rewards: tuple[float, ...]
    first_seen: int

    @property
    def count(self) -> int:
        return len(self.members)

    def frequency(self, total: int) -> float:
        """Share of all ``total`` samples drawn (unanswered ones included) in this class."""
        return self.count / total if total else 0.0

    @property
    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    @property
    def representative(self) -> int:
        """The member returned to the client: the highest-reward one (first on ties),
        or the first member when nothing was scored."""
        if not self.rewards:
            return self.members[0]
        best = max(range(len(self.rewards)), key=lambda i: (self.rewards[i], -i))
        return self.members[best]


def build_classes(
    answers: Sequence[str | None],
    rewards: Sequence[float] | None = None,
    *,
    exact: bool = False,
) -> tuple[AnswerClass, ...]:
    """Answer classes of a pool, in order of first appearance (``None``: no answer);
    ``exact``: equal strings only (canonical JSON answers)."""
    if rewards is not None and len(rewards) != len(answers):
        raise ValueError(f"{len(rewards)} rewards for {len(answers)} answers")
    return tuple(
        AnswerClass(
            answer=group.answer,
            members=group.members,
            rewards=tuple(rewards[i] for i in group.members) if rewards is not None else (),
            first_seen=rank,
        )
        for rank, group in enumerate(group_answers(answers, exact=exact))
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """The classes returned, best first, and which rule chose them."""

    chosen: tuple[AnswerClass, ...]
    rule: Rule
    fallback: str | None = None  # why the requested rule was replaced, if it was


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def top_by_count(classes: Sequence[AnswerClass], k: int) -> tuple[AnswerClass, ...]:
    """Majority voting for pass@k: the ``k`` largest classes, ties to the first seen."""
    _check_k(k)
    return tuple(sorted(classes, key=lambda c: (-c.count, c.first_seen))[:k])


def top_by_reward(classes: Sequence[AnswerClass], k: int) -> tuple[AnswerClass, ...]:
    """Answer-level Best-of-N: the ``k`` classes of highest mean reward, ties to the
    first seen. Every class must carry rewards."""
    _check_k(k)
    if any(c.mean_reward is None for c in classes):
        raise ValueError("Best-of-N needs a reward for every sample")
    return tuple(sorted(classes, key=lambda c: (-(c.mean_reward or 0.0), c.first_seen))[:k])


def top_by_weight(classes: Sequence[AnswerClass], k: int) -> tuple[AnswerClass, ...]:
    """Weighted majority (docs/specs.md §5): the ``k`` classes of largest summed
    weight (the members' ``rewards``: trace confidences for DeepConf), ties to the first
    seen. With every weight 1 it is :func:`top_by_count`."""
    _check_k(k)
    return tuple(sorted(classes, key=lambda c: (-sum(c.rewards), c.first_seen))[:k])


def weighted_share(classes: Sequence[AnswerClass]) -> float:
    """The leading class's share of all the weight (DeepConf's consensus); 0 when none."""
    total = sum(sum(c.rewards) for c in classes)
    if not classes or total <= 0:
        return 0.0
    return max(sum(c.rewards) for c in classes) / total


def select_weighted(classes: Sequence[AnswerClass], k: int) -> Selection:
    return Selection(chosen=top_by_weight(classes, k), rule="weighted-majority")


def select_majority(classes: Sequence[AnswerClass], k: int) -> Selection:
    return Selection(chosen=top_by_count(classes, k), rule="majority")


def select_best_of_n(classes: Sequence[AnswerClass], k: int) -> Selection:
    return Selection(chosen=top_by_reward(classes, k), rule="best-of-n")


def select_best_of_majority(
    classes: Sequence[AnswerClass],
    k: int,
    *,
    alpha: float,
    total: int,
    shares: Mapping[int, float] | None = None,
) -> Selection:
    """Best-of-Majority: classes with ``count / total >= alpha``, top-k by mean reward.

    ``total`` is the number of samples drawn (N). ``shares`` (by ``first_seen``) replaces
    the count share (a confidence vote). An empty filter falls back to majority
    (``fallback`` says so); no classes at all give an empty selection.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if shares is None:
        kept = [c for c in classes if c.frequency(total) >= alpha]
    else:
        kept = [c for c in classes if shares.get(c.first_seen, 0.0) >= alpha]
    if not kept and classes:
        return Selection(
            chosen=top_by_count(classes, k), rule="majority", fallback=FALLBACK_EMPTY_FILTER
        )
    return Selection(chosen=top_by_reward(kept, k), rule="best-of-majority")
