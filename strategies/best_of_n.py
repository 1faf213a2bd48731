"""``best-of-n``: N samples in one engine request, each scored; the answer classes of
highest mean score win (answer-level Best-of-N, as PassAtK's baseline).

With ``k = 1`` this returns the best-scored class, represented by its best-scored
sample; it is Best-of-Majority with ``alpha = 0``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from core.base import JSON, StrategyContext
from strategies.sampling import SamplingStrategy
from strategies.selection import AnswerClass, Selection, select_best_of_n


class BestOfN(SamplingStrategy):
    name: ClassVar[str] = "best-of-n"

    def select(
        self, ctx: StrategyContext, classes: Sequence[AnswerClass], k: int, total: int
    ) -> tuple[Selection, Mapping[str, JSON]]:
        return select_best_of_n(classes, k), {}
