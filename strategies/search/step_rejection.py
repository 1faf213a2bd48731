"""``step-rejection``: N paths, each new step redrawn while the PRM rejects it.

Step-level rejection sampling with a process reward model: every live path draws one
step a round (all paths in one engine round, as the other searches), the PRM scores it,
and a step whose reward is below ``accept`` is dropped and drawn again from the same
path (a fresh seed) instead of being kept. After ``retries`` redraws of one step the
best-scored of its tries is kept, so a path always moves on. A closing step (the end of
thinking) is judged the same way: a path that closes before it reached the answer
draws again and may write another line instead.

Why beside the other three: beam search, DVTS and particle filtering pay a whole path's
tokens (or M candidates) for every survivor, so at equal N they cost what
self-consistency does or more. Here a path that goes wrong pays for one redrawn step
(a line), not for a copy of another path's continuation, and the paths never copy
each other: the N finished paths stay independent samples of steps the PRM accepted,
and the PRM-weighted vote over them (the default ``select``) sees N diverse answers.
Properties: with ``accept: 0`` (or a PRM that accepts everything) it is N independent
samples; a rejected step is never part of a path; after ``retries`` rejections the path
keeps its best try.

Because the paths are independent, ``adaptive: true`` draws them in rounds, N being the
cap, with the stop rule of best-of-n's adaptive vote (``strategies.sampling.adaptive_vote``): a
round of ``adaptive_round`` paths is searched to its end and answered, then the
PRM-weighted vote of every path so far stops the draw once its leader holds
``adaptive_share`` of the weight and ``adaptive_weight`` itself. Rounds continue the
request's seed offsets: no two draws share a seed, and a seeded request is reproducible.
``max_steps`` bounds each round's search.
"""

from __future__ import annotations

import random
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from core.base import JSON, Progress, Result, StrategyContext, StrategyRequest
from core.engine import Engine
from core.errors import InvalidRequest
from strategies.sampling.adaptive_vote import OPTIONS as ADAPTIVE_OPTIONS
from strategies.sampling.adaptive_vote import (
    adaptive_stop,
    leader_share,
    report,
    round_event,
    settled,
)
from strategies.search.path_answers import Answered, answer
from strategies.search.paths import Path
from strategies.search.step_search import COMMON_OPTIONS, SearchState, StepSearch
from strategies.search_options import SearchDefaults, SearchOptions, search_options


@dataclass(frozen=True, slots=True)
class RejectionState(SearchState):
    """Per live path: how often its next step was rejected, and the best rejected try."""

    tries: tuple[int, ...] = ()
    best: tuple[Path | None, ...] = ()


def latest(path: Path) -> float:
    """A path's latest step reward (no step yet: nothing to reject)."""
    return path.rewards[-1] if path.rewards else 1.0


class StepRejection(StepSearch):
    name: ClassVar[str] = "step-rejection"
    body_options: ClassVar[frozenset[str]] = (
        COMMON_OPTIONS | {"accept", "retries"} | ADAPTIVE_OPTIONS
    )

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        super().validate(request, engine)
        stop = adaptive_stop(request)
        if stop is not None and search_options(request, SearchDefaults()).select != "vote":
            raise InvalidRequest(
                "adaptive stops on the weighted vote: it needs select 'vote'", param="adaptive"
            )

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[Progress | Result, None]:
        stop = adaptive_stop(ctx.request)
        if stop is None:
            async for event in super().run(ctx):
                yield event
            return
        search = self.begin(ctx)
        cap = search.n
        finished: list[Path] = []
        every: list[Answered] = []
        share, done = 0.0, False
        search.rounds = 0
        while len(finished) < cap and not done:
            k = min(stop.round, cap - len(finished))
            if finished and (why := ctx.allowance.short(k)) is not None:
                ctx.allowance.stop(why)
                break  # the request's ceiling or deadline: vote over the paths so far
            fresh: list[Path] = []
            search.rounds += 1
            async for event in self.search(search, SearchState(live=(Path(),) * k), fresh):
                yield event
            every += await answer(ctx, fresh, search.ledger)
            finished += fresh
            _, classes = self.vote(search, finished, every)
            share = leader_share(classes)
            done = settled(classes, stop)
            yield Progress(data=round_event(len(finished), share, done))
        adaptive = report(stop, cap, search.rounds, done, share)
        info: dict[str, JSON] = {"adaptive": {**adaptive, "paths": len(finished)}}
        yield await self.result(search, finished, every, info)

    def per_parent(self, options: SearchOptions) -> int:
        return 1

    def advance(
        self,
        state: SearchState,
        children: Sequence[Sequence[Path]],
        n: int,
        options: SearchOptions,
        rng: random.Random,
    ) -> SearchState:
        count = len(state.live)
        tries: tuple[int, ...] = (0,) * count
        best: tuple[Path | None, ...] = (None,) * count
        if isinstance(state, RejectionState) and len(state.tries) == count:
            tries, best = state.tries, state.best
        live: list[Path] = []
        live_tries: list[int] = []
        live_best: list[Path | None] = []
        finished: list[Path] = []
        for parent, group, tried, kept in zip(state.live, children, tries, best, strict=True):
            child = group[0]
            # The best try of this step so far (ties to the newest).
            top = kept if kept is not None and latest(kept) > latest(child) else child
            if latest(child) >= options.accept:
                take: Path | None = child
            elif tried + 1 > options.retries:
                take = top  # out of redraws: the best of this step's tries
            else:
                take = None
            if take is None:
                live.append(parent)
                live_tries.append(tried + 1)
                live_best.append(top)
            elif take.live:
                live.append(take)
                live_tries.append(0)
                live_best.append(None)
            else:
                finished.append(take)
        return RejectionState(
            live=tuple(live),
            complete=state.complete + tuple(finished),
            tries=tuple(live_tries),
            best=tuple(live_best),
        )

    def trace(self, n: int, options: SearchOptions) -> dict[str, JSON]:
        return {"paths": n, "accept": options.accept, "retries": options.retries}
