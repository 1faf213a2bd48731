"""``deepconf``: self-consistency that stops low-confidence traces inside the engine.

DeepConf online (Fu et al. 2025, "Deep Think with Confidence", Algorithm 2), with the
sample budget ``N`` of the request (``X-Budget-Samples``):

1. warm-up: ``warmup`` traces drawn in full, reporting per-token confidences; each
   trace's confidence is its lowest sliding-window mean (``core.token_confidence``);
2. threshold: a percentile of the warm-up confidences: ``variant`` ``low`` keeps the
   top 10% (the 90th percentile, aggressive), ``high`` the top 90% (the 10th);
3. the other ``N - warmup`` traces run in rounds, one engine request per round, with
   the ``confidence`` logits processor, which forces EOS in a trace as soon as its
   window mean falls below the threshold (``kernels.confidence``). A round takes the
   rows the engine has free (``Engine.load``), up to every trace left, so that on a
   server with spare capacity a question finishes in about one trace's time; on a full
   one (or with an unknown load) a round is one trace, which saves the most tokens;
   ``round_size`` fixes it instead;
4. votes are confidence-weighted over the warm-up and the traces that were not stopped;
   sampling ends once the leading answer holds ``consensus`` of the weight, aborting
   the traces still running and drawing no further round, or when the budget is spent.
   Rounds are the paper's trace-by-trace generation made batch-friendly: a round's
   traces finish together (they are about as long as each other), so smaller rounds
   let a consensus stop the draw sooner and cost a round trip each
   (``round_size = N - warmup``: one round, lowest latency, fewest savings).

Defaults (``variant`` high, a warm-up of a quarter of N but at least 4, rounds of one
trace on a full engine, consensus 0.6) were chosen on validation questions by ``thinkgate bench
confidence-grid`` (benchmarks/results/confidence_grid/confidence-grid.md): the fewest tokens
relative to self-consistency at the same budget among the settings as accurate as it at N = 8 and
16. The paper's (``low``, consensus 0.95, a warm-up of 16 for budgets of hundreds) spend
more on the testbed: at N = 8-32, 0.95 is unanimity and the warm-up a large share.

Usage counts every token generated, stopped and aborted traces included. Budgets
compose: thinking and solution budgets apply to every trace (one-pass only: the
online stop needs the processor, so an engine without it answers 503).
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import ClassVar, Final

from core import options
from core.allowance import BudgetSpent
from core.base import JSON, Progress, Result, StrategyContext, StrategyRequest
from core.engine import Engine, EngineLoad, Sample, TokenLogprob
from core.errors import BackendUnavailable, InvalidBudget, InvalidRequest
from core.token_confidence import lowest_group, percentile
from kernels.confidence import args as conf_args
from strategies.pool import (
    Draw,
    Pool,
    analyse,
    defaults_of,
    draw,
    final_event,
    requested_k,
    requested_samples,
    start_draw,
    validate_common,
)
from strategies.selection import select_weighted, weighted_share
from strategies.voting import OPTIONS as VOTE_OPTIONS
from strategies.voting import (
    VoteOptions,
    share_option,
    trace_confidences,
    vote_options,
    voting_classes,
)

PROCESSOR: Final = conf_args.PROCESSOR_NAME  # as Engine.processors reports it
VARIANTS: Final = {"low": 90.0, "high": 10.0}  # variant -> percentile of the warm-up
# Chosen on validation questions (module doc;
# benchmarks/results/confidence_grid/confidence-grid.md).
DEFAULT_VARIANT: Final = "high"
DEFAULT_CONSENSUS: Final = 0.6
DEFAULT_ROUND_SIZE: Final = 1  # the token-saving round, when the engine has no rows free
MIN_WARMUP: Final = 4  # a threshold from fewer traces is one trace's whim
MAX_WARMUP_BOUND: Final = 1 << 20  # validate() without a samples budget: no bound yet


@dataclass(frozen=True, slots=True, kw_only=True)
class OnlinePlan:
    samples: int  # N: the most traces drawn
    warmup: int
    round_size: int | None  # traces per online engine request; None: by the engine's load
    variant: str
    consensus: float
    votes: VoteOptions


def default_warmup(n: int, floor: int = MIN_WARMUP) -> int:
    """The warm-up of a budget of ``n`` traces: a quarter of it, at least ``floor`` (the
    threshold is a percentile of these, and they all vote before any consensus can end
    the draw). ``floor`` is a parameter for benchmarks/confidence_grid.py, which tries
    several."""
    return min(n, max(floor, math.ceil(n / 4)))


def _warmup(request: StrategyRequest, n: int) -> int:
    return options.integer(request.options, "warmup", default_warmup(n), hi=n)


def _round_size(request: StrategyRequest) -> int | None:
    return options.integer(request.options, "round_size", None)


def _online_plan(request: StrategyRequest, n: int) -> OnlinePlan:
    variant = options.choice(request.options, "variant", DEFAULT_VARIANT, VARIANTS)
    votes = vote_options(request, default="confidence")
    if votes.vote == "majority":
        raise InvalidRequest(
            "deepconf votes by confidence (confidence or confidence-top)", param="vote"
        )
    warmup = _warmup(request, n)
    return OnlinePlan(
        samples=n,
        warmup=warmup,
        round_size=_round_size(request),
        variant=variant,
        consensus=share_option(request, "consensus", DEFAULT_CONSENSUS),
        votes=votes,
    )


class DeepConf:
    name: ClassVar[str] = "deepconf"
    budget_fields: ClassVar[frozenset[str]] = frozenset(
        {"samples", "k", "thinking", "solution", "thinking_min"}
    )
    body_options: ClassVar[frozenset[str]] = frozenset(
        {"warmup", "round_size", "variant", "consensus", "elastic_mode", *VOTE_OPTIONS}
    )
    streams_live: ClassVar[bool] = False
    # Calls vote (confidence-weighted) as their canonical (name, arguments), as in the
    # sampling strategies; the answer's grammar (response_format) is not applied here.
    honours_tools: ClassVar[bool] = True
    # The chosen trace's own logprobs (warm-up or online), as the sampling strategies.
    returns_logprobs: ClassVar[bool] = True

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        validate_common(request, engine, uses_scorer=False, uses_vote=True)
        # Without a samples budget the server default applies: run() checks warmup then.
        _online_plan(request, request.budget.samples or MAX_WARMUP_BOUND)
        if request.budget.samples is not None and request.budget.samples < 2:
            raise InvalidBudget(
                "deepconf needs samples >= 2 (a warm-up and a vote)", param="samples"
            )

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[Progress | Result, None]:
        n, k, plan = _checked(ctx)
        # 1. warm-up, drawn in full
        # (two-pass budgets cannot carry confidences: start_draw answers 503 for them)
        warm = start_draw(
            ctx, plan.warmup, logprobs=False, top_logprobs=plan.votes.top_k, suffix="warmup"
        )
        pool = Pool(samples=[])
        async for p in draw(warm, pool):
            yield _progress(p, "warmup", plan)
        # 2. the threshold, from the warm-up's confidences
        traces = _warmed(ctx, plan, list(pool.samples))
        # 3. the rest, in rounds guarded by the threshold, until consensus or the budget
        async with aclosing(_online(ctx, plan, n, traces)) as online:
            async for p in online:
                yield p
        # 4. the vote
        analysed = analyse(ctx, traces.samples)
        classes = voting_classes(traces.answers, traces.confs, plan.votes, traces.voters)
        selection = select_weighted(classes, k)
        info = {"strategy": self.name, **_info(plan, n, k, traces, warm)}
        yield final_event(ctx, analysed, traces.confs, classes, selection, warm.plan, info)


@dataclass(slots=True, kw_only=True)
class _Traces:
    """The traces drawn so far, warm-up first, and their vote: what each online round
    adds to. Per trace its confidence, whether it votes, and its answer."""

    samples: list[Sample]
    confs: list[float]
    voters: list[bool]
    answers: list[str | None]
    threshold: float  # the online stop's: a percentile of the warm-up's confidences
    share: float  # the leading answer's share of the vote
    stopped: int = 0  # traces the threshold stopped (they do not vote)
    aborted: int = 0  # traces cut by the consensus stop
    rounds: int = 0
    sizes: list[int] = field(default_factory=list)
    loads: list[JSON] = field(default_factory=list)

    def revote(self, plan: OnlinePlan) -> None:
        self.share = weighted_share(
            voting_classes(self.answers, self.confs, plan.votes, self.voters)
        )


def _checked(ctx: StrategyContext) -> tuple[int, int, OnlinePlan]:
    """The request's samples budget ``n``, its ``k`` and the online plan, checked against
    each other and the engine (the confidence processor is needed)."""
    request = ctx.request
    n = requested_samples(request, defaults_of(ctx))
    k = requested_k(request)
    if k > n:
        raise InvalidBudget(f"k={k} exceeds samples={n}", param="k")
    plan = _online_plan(request, n)
    if PROCESSOR not in ctx.engine.processors:
        raise BackendUnavailable(
            "deepconf stops traces inside the engine: this server's engine has no "
            "confidence logits processor (start it with --logits-processors including "
            "'confidence'; replicas: thinkgate replica --processors)",
            param="strategy",
            code="resource_unavailable",
        )
    return n, k, plan


def _warmed(ctx: StrategyContext, plan: OnlinePlan, samples: list[Sample]) -> _Traces:
    """The warm-up's traces, every one voting, and the threshold their confidences set."""
    confs = trace_confidences(samples, plan.votes.window)
    traces = _Traces(
        samples=samples,
        confs=confs,
        voters=[True] * len(samples),
        answers=list(analyse(ctx, samples).answers),
        threshold=percentile(confs, VARIANTS[plan.variant]),
        share=0.0,
    )
    traces.revote(plan)
    return traces


async def _online(
    ctx: StrategyContext, plan: OnlinePlan, n: int, traces: _Traces
) -> AsyncGenerator[Progress, None]:
    """The online rounds: each one engine request of the traces the engine has room for,
    under the threshold, until the consensus is reached or the budget is spent."""
    args = conf_args.ConfidenceArgs(
        threshold=traces.threshold,
        window=plan.votes.window,
        top_k=plan.votes.top_k,
        eos_id=ctx.engine.tokens.eos_token_ids[0],
    )
    while len(traces.samples) < n and traces.share < plan.consensus:
        size, seen = round_size(plan, n - len(traces.samples), ctx.engine.load())
        if (why := ctx.allowance.short(size)) is not None:
            ctx.allowance.stop(why)  # the request's ceiling or deadline: vote so far
            break
        try:
            online = start_draw(
                ctx,
                size,
                logprobs=False,
                top_logprobs=plan.votes.top_k,
                extra_args=conf_args.extra_args(args),
                suffix=f"online-{traces.rounds}",
                first=len(traces.samples),
            )
        except BudgetSpent as spent:
            ctx.allowance.stop(spent.reason)
            break
        traces.sizes.append(online.n)  # fewer when the ceiling leaves fewer answers' room
        traces.loads.append(seen)
        traces.rounds += 1
        async with aclosing(_round(ctx, plan, n - plan.warmup, traces, online)) as events:
            async for p in events:
                yield p


async def _round(
    ctx: StrategyContext, plan: OnlinePlan, rest: int, traces: _Traces, online: Draw
) -> AsyncGenerator[Progress, None]:
    """One online round: each trace votes as it finishes, and a consensus ends the round
    (closing the stream aborts the traces still running; their tokens count)."""
    size = online.n
    client_logprobs = ctx.request.sampling.token_logprobs is not None
    ids: list[list[int]] = [[] for _ in range(size)]
    cs: list[list[float]] = [[] for _ in range(size)]
    lps: list[list[TokenLogprob]] = [[] for _ in range(size)]  # the client's
    done: set[int] = set()
    async with aclosing(online.deltas) as deltas:
        async for delta in deltas:
            if delta.redrawn:  # its server failed: drawn again from scratch
                ids[delta.index].clear()
                cs[delta.index].clear()
                lps[delta.index].clear()
                continue
            ids[delta.index].extend(delta.token_ids)
            if delta.logprobs is not None:
                lps[delta.index].extend(delta.logprobs)
            if delta.confidences is not None:
                cs[delta.index].extend(delta.confidences)
            if delta.finish_reason is None or delta.index in done:
                continue
            done.add(delta.index)
            sample = Sample(
                index=len(traces.samples),
                token_ids=tuple(ids[delta.index]),
                finish_reason=delta.finish_reason,
                stop_reason=delta.stop_reason,
                confidences=tuple(cs[delta.index]),
                logprobs=tuple(lps[delta.index]) if client_logprobs else None,
            )
            progress = _finished(ctx, plan, rest, traces, sample)
            yield _progress(Progress(data={**progress, "round": traces.rounds}), "online", plan)
            if traces.share >= plan.consensus:
                break  # closing the stream aborts the traces still running
    # Traces cut by the consensus stop: their tokens were generated, so they count.
    for i in range(size):
        if i not in done:
            traces.aborted += 1
            traces.samples.append(
                Sample(
                    index=len(traces.samples),
                    token_ids=tuple(ids[i]),
                    finish_reason="abort",
                    confidences=tuple(cs[i]),
                )
            )
            traces.confs.append(0.0)
            traces.voters.append(False)
            traces.answers.append(None)


def _finished(
    ctx: StrategyContext, plan: OnlinePlan, rest: int, traces: _Traces, sample: Sample
) -> dict[str, JSON]:
    """An online trace that finished, added to the vote; its progress event's data."""
    window = plan.votes.window
    traces.samples.append(sample)
    conf = max(lowest_group(sample.confidences or (), window), 0.0)
    traces.confs.append(conf)
    # The processor stops a trace once a full window is below the threshold; such a
    # trace does not vote (it ended mid-thought).
    was_stopped = len(sample.token_ids) >= window and conf < traces.threshold
    traces.stopped += was_stopped
    traces.voters.append(not was_stopped)
    traces.answers.append(analyse(ctx, [sample]).answers[0])
    traces.revote(plan)
    return {
        "samples_done": len(traces.samples) - plan.warmup,
        "samples": rest,
        "sample": {
            "index": sample.index,
            "tokens": len(sample.token_ids),
            "finish_reason": sample.finish_reason,
            "answer": traces.answers[-1],
            "confidence": round(conf, 6),
            "votes": not was_stopped,
        },
        "leader_share": round(traces.share, 6),
    }


def _info(plan: OnlinePlan, n: int, k: int, traces: _Traces, warm: Draw) -> dict[str, JSON]:
    """The result's ``thinkgate`` object, less the strategy's name."""
    info: dict[str, JSON] = {
        "samples": len(traces.samples),
        "samples_budget": n,
        "engine_requests": 1 + traces.rounds,
        "rounds": traces.rounds,
        "round_size": plan.round_size,
        "schedule": "fixed" if plan.round_size is not None else "load",
        "round_sizes": list(traces.sizes),
        "loads_seen": traces.loads,
        "k": k,
        "scorer": None,
        "vote": plan.votes.vote,
        "variant": plan.variant,
        "warmup": plan.warmup,
        "threshold": round(traces.threshold, 6),
        "window": plan.votes.window,
        "top_k": plan.votes.top_k,
        "consensus": round(traces.share, 6),
        "consensus_target": plan.consensus,
        "stopped_early": traces.stopped,
        "aborted_at_consensus": traces.aborted,
        "sample_confidences": [round(c, 6) for c in traces.confs],
        "sample_voted": traces.voters,
        **_savings(traces.samples, traces.voters, n),
    }
    if warm.plan is not None:
        info["per_sample_budget"] = {
            "thinking": warm.plan.thinking,
            "solution": warm.plan.solution,
            "mode": warm.mode,
        }
    return info


def round_size(plan: OnlinePlan, left: int, load: EngineLoad | None) -> tuple[int, JSON]:
    """The next online round's size, and the load it was chosen by (for the ``thinkgate``
    object). A fixed ``round_size`` is kept. Otherwise the round takes the engine's free
    rows, up to every trace left: an idle engine runs them side by side and the question
    finishes in about one trace's time; a full one (or an unknown load) gets the
    token-saving round of one trace, where each finished trace may reach the consensus
    before the next one is drawn. Only when traces are drawn changes, never how they
    vote."""
    if plan.round_size is not None:
        return min(plan.round_size, left), None
    if load is None:
        return min(DEFAULT_ROUND_SIZE, left), None
    size = min(left, max(DEFAULT_ROUND_SIZE, load.free))
    return size, {"rows": load.rows, "busy": load.busy, "waiting": load.waiting}


def _progress(p: Progress, phase: str, plan: OnlinePlan) -> Progress:
    return Progress(data={**p.data, "phase": phase, "budget": plan.samples})


def _savings(samples: Sequence[Sample], voters: Sequence[bool], budget: int) -> Mapping[str, JSON]:
    """Tokens saved against running every trace of the budget to its end, estimated with
    the mean length of the traces that did end naturally (an estimate: a stopped trace's
    natural length is unknowable)."""
    full = [len(s.token_ids) for s, v in zip(samples, voters, strict=True) if v]
    if not full:
        return {"tokens_saved_estimate": None}
    mean = sum(full) / len(full)
    cut = sum(
        max(0.0, mean - len(s.token_ids)) for s, v in zip(samples, voters, strict=True) if not v
    )
    never = max(0, budget - len(samples)) * mean
    return {"tokens_saved_estimate": round(cut + never), "mean_full_trace_tokens": round(mean, 1)}
