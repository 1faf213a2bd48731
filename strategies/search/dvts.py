"""``dvts``: diverse verifier tree search, N / M independent greedy subtrees.

Beeching et al. 2024: the N samples are split into N / M subtrees (M = ``expansions``);
each step expands every live subtree's single path by M one-step candidates (all
subtrees in one engine round) and keeps its best by PRM score, so subtrees never
compete and the search keeps N / M diverse lines. A subtree whose best candidate ends
its thinking is finished. With N / M = 1 it is beam search of width 1.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

from core.base import JSON, StrategyContext
from core.errors import InvalidBudget
from strategies.search.paths import Path
from strategies.search.step_search import COMMON_OPTIONS, SearchState, StepSearch, best_index
from strategies.search_options import SearchOptions


class Dvts(StepSearch):
    name: ClassVar[str] = "dvts"
    body_options: ClassVar[frozenset[str]] = COMMON_OPTIONS | {"expansions"}

    def check(self, n: int, options: SearchOptions) -> None:
        m = options.expansions
        if n < m or n % m:
            raise InvalidBudget(
                f"dvts splits samples={n} into subtrees of expansions={m}: samples must be "
                "a multiple of expansions",
                param="samples",
            )

    def start(self, ctx: StrategyContext, n: int, options: SearchOptions) -> SearchState:
        return SearchState(live=(Path(),) * (n // options.expansions))

    def per_parent(self, options: SearchOptions) -> int:
        return options.expansions

    def advance(
        self,
        state: SearchState,
        children: Sequence[Sequence[Path]],
        n: int,
        options: SearchOptions,
        rng: random.Random,
    ) -> SearchState:
        live: list[Path] = []
        finished: list[Path] = []
        for group in children:
            best = group[best_index(group, options)]
            (live if best.live else finished).append(best)
        return SearchState(live=tuple(live), complete=state.complete + tuple(finished))

    def trace(self, n: int, options: SearchOptions) -> dict[str, JSON]:
        return {"subtrees": n // options.expansions, "expansions": options.expansions}
