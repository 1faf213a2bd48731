"""Drawing a sampling strategy's pool in rounds until its weighted vote settles.

Each round is one engine request of ``stop.round`` samples (fewer for the last, up to
the cap N), seeded to continue the pool (``start_draw``'s ``first``), its samples scored in
one scorer call once the round is in; the rule (``strategies.sampling.adaptive_vote``) then reads
the vote of everything drawn so far. A client that leaves closes the round in flight, which
aborts its samples in the engine, and no further round starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from core.allowance import BudgetSpent
from core.base import JSON, Progress, Result, StrategyContext
from core.engine import Sample
from strategies.pool import Analysed, Draw, Pool, analyse, draw, score, start_draw
from strategies.sampling.adaptive_vote import round_event
from strategies.scorers import Scorer
from strategies.selection import AnswerClass, build_classes


class StopRule(Protocol):
    """When a draw in rounds stops: the PRM-weighted vote's share
    (``adaptive_vote.AdaptiveStop``) or the majority's Beta posterior
    (``vote_stop.VoteStop``)."""

    @property
    def round(self) -> int: ...

    @property
    def measure(self) -> str: ...

    def judge(self, classes: Sequence[AnswerClass]) -> tuple[bool, float]: ...

    def report(self, cap: int, rounds: int, done: bool, measure: float) -> dict[str, JSON]: ...


@dataclass(slots=True)
class Drawn:
    """What :func:`draw_adaptive` drew under ``stop`` and ``cap``, filled as it goes."""

    stop: StopRule
    cap: int
    samples: list[Sample] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    draws: list[Draw] = field(default_factory=list)
    settled: bool = False
    measure: float = 0.0  # what the rule read last: the leader's share, or the posterior
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
        return self.stop.report(self.cap, self.rounds, self.settled, self.measure)


async def draw_adaptive(
    ctx: StrategyContext, scorer: Scorer | None, drawn: Drawn
) -> AsyncIterator[Progress]:
    """Rounds until the vote settles or ``drawn.cap`` samples are drawn, into ``drawn``;
    yields ``{"samples_done": i, "samples": cap}`` per finished sample and
    ``{"phase": "adaptive", ...}`` after each round. Without a scorer every sample
    weighs 1 (the majority vote)."""
    stop, cap = drawn.stop, drawn.cap
    staged = _per_sample(ctx, cap)
    while len(drawn.samples) < cap:
        first = len(drawn.samples)
        size = min(stop.round, cap - first)
        if first and (why := ctx.allowance.short(size)) is not None:
            ctx.allowance.stop(why)
            return  # the request's ceiling or deadline: vote over what was drawn
        try:
            source = start_draw(
                staged,
                size,
                logprobs=scorer is not None and scorer.needs_logprobs,
                suffix=f"pool{drawn.rounds}",
                first=first,
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
        if scorer is None:
            drawn.rewards += [1.0] * len(fresh)
        else:
            drawn.rewards += await score(ctx, scorer, analyse(ctx, fresh))
        drawn.samples += fresh
        drawn.pool = read = analyse(ctx, drawn.samples)
        classes = build_classes(read.answers, drawn.rewards, exact=read.exact)
        drawn.settled, drawn.measure = stop.judge(classes)
        event = round_event(len(drawn.samples), drawn.measure, drawn.settled, measure=stop.measure)
        yield Progress(data=event)
        if drawn.settled:
            return


def _per_sample(ctx: StrategyContext, cap: int) -> StrategyContext:
    """``ctx`` with each sample held to the share of the ceiling one draw of ``cap``
    would give it: every round's samples are then the ones that draw would make, and the
    rounds' worst cases together never pass the ceiling."""
    left = ctx.allowance.left()
    if left is None:
        return ctx
    sampling = ctx.request.sampling
    per = max(1, left // max(1, cap))
    limit = per if sampling.max_tokens is None else min(per, sampling.max_tokens)
    request = replace(ctx.request, sampling=replace(sampling, max_tokens=limit))
    return replace(ctx, request=request)


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
