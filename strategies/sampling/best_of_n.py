"""``best-of-n``: N samples in one engine request, each scored; the answer classes of
highest mean score win (answer-level Best-of-N, as PassAtK's baseline).

With ``k = 1`` this returns the best-scored class, represented by its best-scored
sample; it is Best-of-Majority with ``alpha = 0``.

Body option ``select``: ``best`` (the default, above) or ``vote``: the classes of
largest summed score win, a score-weighted majority (search-and-learn's "weighted
Best-of-N"), for a scorer whose scores are weights (``prm``: probabilities); another
scorer's log-probabilities or logits are a 400.

Body option ``adaptive`` (with ``select: vote``): draw in rounds and stop once the
weighted vote has settled, N being the cap (``strategies.sampling.adaptive_vote``; tuned by
``adaptive_round``, ``adaptive_share``, ``adaptive_weight``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Final

from core import options
from core.base import JSON, StrategyContext, StrategyRequest
from core.engine import Engine
from core.errors import InvalidRequest
from strategies.json_answers import ANSWER_FIELD
from strategies.sampling.adaptive_vote import OPTIONS as ADAPTIVE_OPTIONS
from strategies.sampling.adaptive_vote import AdaptiveStop, adaptive_stop
from strategies.sampling.base import SamplingStrategy
from strategies.scorers import Scorer
from strategies.selection import AnswerClass, Selection, select_best_of_n, select_weighted

SELECTS: Final = ("best", "vote")


def _select(request: StrategyRequest) -> str:
    return options.choice(request.options, "select", "best", SELECTS)


class BestOfN(SamplingStrategy):
    name: ClassVar[str] = "best-of-n"
    body_options: ClassVar[frozenset[str]] = frozenset(
        {"elastic_mode", "scorer", "select", ANSWER_FIELD, *ADAPTIVE_OPTIONS}
    )

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        super().validate(request, engine)
        select = _select(request)  # a bad value: a 400 before the engine call
        if adaptive_stop(request) is not None and select != "vote":
            raise InvalidRequest(
                "adaptive stops on the weighted vote: it needs select 'vote'", param="adaptive"
            )

    def adaptive(self, request: StrategyRequest) -> AdaptiveStop | None:
        return adaptive_stop(request)

    def check_scorer(self, ctx: StrategyContext, scorer: Scorer | None) -> None:
        if _select(ctx.request) == "vote" and not getattr(scorer, "weights", False):
            name = scorer.name if scorer is not None else None
            raise InvalidRequest(
                f"select 'vote' sums the scores as weights; scorer {name!r} gives "
                "log-probabilities or logits (use scorer 'prm', or select 'best')",
                param="select",
            )

    def select(
        self, ctx: StrategyContext, classes: Sequence[AnswerClass], k: int, total: int
    ) -> tuple[Selection, Mapping[str, JSON]]:
        if _select(ctx.request) == "vote":
            return select_weighted(classes, k), {"select": "vote"}
        return select_best_of_n(classes, k), {}
