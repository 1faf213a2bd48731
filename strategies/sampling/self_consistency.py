"""``self-consistency``: N samples in one engine request, majority vote on their answers.

Wang et al. 2022 (docs/specs.md §5): the largest answer class wins, ties to the
class seen first; with ``k > 1`` the ``k`` largest classes are returned, best first.
Body option ``vote`` (``strategies.voting``): ``confidence`` or ``confidence-top`` weigh
each sample by its trace confidence (DeepConf offline) instead. ``adaptive: true`` draws
in stages and stops once the majority is settled (``strategies.vote_stop``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from core.base import JSON, StrategyContext, StrategyRequest
from core.engine import Engine
from core.errors import InvalidRequest
from strategies.json_answers import ANSWER_FIELD
from strategies.sampling.base import SamplingStrategy
from strategies.selection import AnswerClass, Selection, select_majority
from strategies.vote_stop import OPTIONS as STOP_OPTIONS
from strategies.vote_stop import VoteStop, vote_stop
from strategies.voting import OPTIONS as VOTE_OPTIONS
from strategies.voting import vote_options


class SelfConsistency(SamplingStrategy):
    name: ClassVar[str] = "self-consistency"
    uses_scorer: ClassVar[bool] = False
    uses_vote: ClassVar[bool] = True
    body_options: ClassVar[frozenset[str]] = frozenset(
        {"elastic_mode", ANSWER_FIELD, *VOTE_OPTIONS, *STOP_OPTIONS}
    )

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        super().validate(request, engine)
        if vote_stop(request) is not None and vote_options(request).needs_confidence:
            raise InvalidRequest(
                "adaptive stops on the majority vote: it does not take vote "
                f"{request.options.get('vote')!r}",
                param="adaptive",
            )

    def adaptive(self, request: StrategyRequest) -> VoteStop | None:
        return vote_stop(request)

    def select(
        self, ctx: StrategyContext, classes: Sequence[AnswerClass], k: int, total: int
    ) -> tuple[Selection, Mapping[str, JSON]]:
        return select_majority(classes, k), {}
