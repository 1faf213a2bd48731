"""``beam-search``: N beams, M one-step candidates per beam, the N best kept by PRM score.

Snell et al. 2024 / Hugging Face's search-and-learn, on a server: each step draws
``expansions`` (M) candidates from each of the N beams (N x M candidates, one engine
round; the first step draws all N x M from the prompt in one request), scores every new
step with the PRM, and keeps the N live candidates of highest aggregate score (the
``aggregate`` option: the last step's reward, the minimum or the product). A candidate
that ends its thinking is finished and leaves the beam; the search stops when N paths
have finished, no beam is live, or ``max_steps`` is reached. With M = 1 and a constant
PRM it is N independent samples.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

from core.base import JSON
from strategies.search.paths import Path
from strategies.search.step_search import COMMON_OPTIONS, SearchState, StepSearch, path_score
from strategies.search_options import SearchOptions


class BeamSearch(StepSearch):
    name: ClassVar[str] = "beam-search"
    body_options: ClassVar[frozenset[str]] = COMMON_OPTIONS | {"expansions"}

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
        flat = [c for group in children for c in group]
        finished = tuple(c for c in flat if not c.live)
        live = [c for c in flat if c.live]
        # Stable sort: equal scores keep generation order, so ties go to the first drawn.
        live.sort(key=lambda p: -path_score(p, options))
        return SearchState(live=tuple(live[:n]), complete=state.complete + finished)

    def done(self, state: SearchState, n: int) -> bool:
        return not state.live or len(state.complete) >= n

    def trace(self, n: int, options: SearchOptions) -> dict[str, JSON]:
        return {"beams": n, "expansions": options.expansions}
