"""``best-of-majority``: pass@k by Best-of-Majority (docs/specs.md §3).

N samples in one engine request, each scored; answer classes whose frequency reaches
``alpha`` (body field, else the server default 0.02) are kept, and the ``k`` of highest
mean score are returned, best first. When no class reaches ``alpha`` the answer falls
back to majority voting, and the ``thinkgate`` object says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from core.base import JSON, StrategyContext
from strategies.json_answers import ANSWER_FIELD
from strategies.pool import defaults_of, option_alpha
from strategies.sampling.base import SamplingStrategy
from strategies.selection import AnswerClass, Selection, select_best_of_majority
from strategies.voting import OPTIONS as VOTE_OPTIONS


class BestOfMajority(SamplingStrategy):
    name: ClassVar[str] = "best-of-majority"
    uses_alpha: ClassVar[bool] = True
    uses_vote: ClassVar[bool] = True
    body_options: ClassVar[frozenset[str]] = frozenset(
        {"elastic_mode", "scorer", "alpha", ANSWER_FIELD, *VOTE_OPTIONS}
    )

    def select(
        self, ctx: StrategyContext, classes: Sequence[AnswerClass], k: int, total: int
    ) -> tuple[Selection, Mapping[str, JSON]]:
        alpha = _alpha(ctx)
        selection = select_best_of_majority(classes, k, alpha=alpha, total=total)
        return selection, {"alpha": alpha}

    def select_by_confidence(
        self,
        ctx: StrategyContext,
        classes: Sequence[AnswerClass],
        k: int,
        shares: Mapping[int, float],
    ) -> tuple[Selection, Mapping[str, JSON]]:
        """A confidence vote: the frequency filter reads each class's share of the
        voting confidence instead of its count share; the scorer still ranks."""
        alpha = _alpha(ctx)
        selection = select_best_of_majority(classes, k, alpha=alpha, total=0, shares=shares)
        return selection, {"alpha": alpha}


def _alpha(ctx: StrategyContext) -> float:
    """The request's ``alpha``, else the server default."""
    alpha = option_alpha(ctx.request)
    return defaults_of(ctx).alpha if alpha is None else alpha
