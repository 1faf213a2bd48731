"""Drawing a sampling strategy's pool in rounds until its weighted vote settles.

Each round is one engine request of ``stop.round`` samples (fewer for the last, up to
the cap N), seeded to continue the pool (``start_draw``'s ``first``), its samples scored in
one scorer call once the round is in; the rule (``strategies.sampling.adaptive_vote``) then reads
the vote of everything drawn so far. A client that leaves closes the round in flight, which
aborts its samples in the engine, and no further round starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace

from core.allowance import BudgetSpent
from core.base import JSON, Progress, Result, StrategyContext
from core.engine import Sample
from strategies.pool import Analysed, Draw, Pool, analyse, draw, score, start_draw
from strategies.sampling.adaptive_vote import (
    AdaptiveStop,
    leader_share,
    report,
    round_event,
    settled,
)
from strategies.scorers import Scorer
from strategies.selection import build_classes


@dataclass(slots=True)
class Drawn:
    """What :func:`draw_adaptive` drew under ``stop`` and ``cap``, filled as it goes."""

    stop: AdaptiveStop
    cap: int
    samples: list[Sample] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    draws: list[Draw] = field(default_factory=list)
    settled: bool = False
    leader_share: float = 0.0
    pool: Analysed | None = None  # every sample so far, read (the vote's input)

    @property
    def first(self) -> Draw:
        """The first round's draw: its elastic plan is every round's (one per sample)."""
        return self.draws[0]

    @property
    def rounds(self) -> int:
        return len(self.draws)

    @property
    def engine_requests(self) -> int:
        return sum(d.engine_requests for d in self.draws)

    @property
    def analysed(self) -> Analysed:
        assert self.pool is not None, "nothing drawn yet"
        return self.pool

    def info(self) -> dict[str, JSON]:
        return report(self.stop, self.cap, self.rounds, self.settled, self.leader_share)


async def draw_adaptive(
    ctx: StrategyContext, scorer: Scorer, drawn: Drawn
) -> AsyncIterator[Progress]:
    """Rounds until the vote settles or ``drawn.cap`` samples are drawn, into ``drawn``;
    yields ``{"samples_done": i, "samples": cap}`` per finished sample and
    ``{"phase": "adaptive", ...}`` after each round."""
    stop, cap = drawn.stop, drawn.cap
    while len(drawn.samples) < cap:
        first = len(drawn.samples)
        size = min(stop.round, cap - first)
        if first and (why := ctx.allowance.short(size)) is not None:
            ctx.allowance.stop(why)
            return  # the request's ceiling or deadline: vote over what was drawn
        try:
            source = start_draw(
                ctx, size, logprobs=scorer.needs_logprobs, suffix=f"pool{drawn.rounds}", first=first
            )
        except BudgetSpent as spent:
            if not first:
                raise
            ctx.allowance.stop(spent.reason)
            return
        drawn.draws.append(source)
        pool = Pool(samples=[])
        async for progress in draw(source, pool):
            yield Progress(data=in_whole_pool(progress.data, first, cap))
        # Positions in the whole pool: the engine numbered each round's from 0.
        fresh = [replace(s, index=first + s.index) for s in pool.samples]
        drawn.rewards += await score(ctx, scorer, analyse(ctx, fresh))
        drawn.samples += fresh
        drawn.pool = read = analyse(ctx, drawn.samples)
        classes = build_classes(read.answers, drawn.rewards, exact=read.exact)
        drawn.leader_share = leader_share(classes)
        drawn.settled = settled(classes, stop)
        yield Progress(data=round_event(len(drawn.samples), drawn.leader_share, drawn.settled))
        if drawn.settled:
            return


def with_round_prompts(ctx: StrategyContext, result: Result, rounds: int) -> Result:
    """``usage`` counts the prompt once (one request); each further round sent it again."""
    extra = len(ctx.request.prompt_token_ids) * (rounds - 1)
    usage = replace(result.usage, prompt_tokens=result.usage.prompt_tokens + extra)
    return replace(result, usage=usage)


def in_whole_pool(event: Mapping[str, JSON], first: int, cap: int) -> dict[str, JSON]:
    """A round's draw event in the whole pool's numbering: its samples start at ``first``
    of at most ``cap``."""
    if "growing" in event:
        return {**event, "samples": cap, "first": first}
    done = event.get("samples_done")
    out: dict[str, JSON] = {
        "samples_done": first + (done if isinstance(done, int) else 0),
        "samples": cap,
    }
    sample = event.get("sample")
    if isinstance(sample, dict) and isinstance(index := sample.get("index"), int):
        out["sample"] = {**sample, "index": first + index}
    return out
