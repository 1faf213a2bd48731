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
confidence-grid`` (benchmarks/results/confidence-grid.md): the fewest tokens relative to
self-consistency at the same budget among the settings as accurate as it at N = 8 and
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
from dataclasses import dataclass
from typing import ClassVar, Final

from core import options
from core.allowance import BudgetSpent
from core.base import JSON, Progress, Result, StrategyContext, StrategyRequest
from core.engine import Engine, EngineLoad, Sample, TokenLogprob
from core.errors import BackendUnavailable, InvalidBudget, InvalidRequest
from core.token_confidence import lowest_group, percentile
from kernels.confidence import args as conf_args
from strategies.pool import (
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
# Chosen on validation questions (module doc; benchmarks/results/confidence-grid.md).
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


def online_plan(request: StrategyRequest, n: int) -> OnlinePlan:
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
        online_plan(request, request.budget.samples or MAX_WARMUP_BOUND)
        if request.budget.samples is not None and request.budget.samples < 2:
            raise InvalidBudget(
                "deepconf needs samples >= 2 (a warm-up and a vote)", param="samples"
            )

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[Progress | Result, None]:
        request, engine = ctx.request, ctx.engine
        n = requested_samples(request, defaults_of(ctx))
        k = requested_k(request)
        if k > n:
            raise InvalidBudget(f"k={k} exceeds samples={n}", param="k")
        plan = online_plan(request, n)
        if PROCESSOR not in engine.processors:
            raise BackendUnavailable(
                "deepconf stops traces inside the engine: this server's engine has no "
                "confidence logits processor (start it with --logits-processors including "
                "'confidence'; replicas: thinkgate replica --processors)",
                param="strategy",
                code="resource_unavailable",
            )
        top_k, window = plan.votes.top_k, plan.votes.window

        # 1. warm-up, drawn in full
        # (two-pass budgets cannot carry confidences: start_draw answers 503 for them)
        warm = start_draw(ctx, plan.warmup, logprobs=False, top_logprobs=top_k, suffix="warmup")
        pool = Pool(samples=[])
        async for p in draw(warm, pool):
            yield _progress(p, "warmup", plan)
        samples = list(pool.samples)
        confs = trace_confidences(samples, window)
        threshold = percentile(confs, VARIANTS[plan.variant])
        voters = [True] * len(samples)
        stopped = aborted = 0
        answers = list(analyse(ctx, samples).answers)
        share = weighted_share(voting_classes(answers, confs, plan.votes, voters))

        # 2. the rest, in rounds guarded by the threshold, until consensus or the budget
        rest = n - plan.warmup
        rounds = 0
        args = conf_args.ConfidenceArgs(
            threshold=threshold,
            window=window,
            top_k=top_k,
            eos_id=engine.tokens.eos_token_ids[0],
        )
        sizes: list[int] = []
        loads: list[JSON] = []
        client_logprobs = request.sampling.token_logprobs is not None
        while len(samples) < n and share < plan.consensus:
            size, seen = round_size(plan, n - len(samples), engine.load())
            if (why := ctx.allowance.short(size)) is not None:
                ctx.allowance.stop(why)  # the request's ceiling or deadline: vote so far
                break
            try:
                online = start_draw(
                    ctx,
                    size,
                    logprobs=False,
                    top_logprobs=top_k,
                    extra_args=conf_args.extra_args(args),
                    suffix=f"online-{rounds}",
                    first=len(samples),
                )
            except BudgetSpent as spent:
                ctx.allowance.stop(spent.reason)
                break
            size = online.n  # fewer when the ceiling leaves fewer answers' room
            sizes.append(size)
            loads.append(seen)
            rounds += 1
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
                        index=len(samples),
                        token_ids=tuple(ids[delta.index]),
                        finish_reason=delta.finish_reason,
                        stop_reason=delta.stop_reason,
                        confidences=tuple(cs[delta.index]),
                        logprobs=tuple(lps[delta.index]) if client_logprobs else None,
                    )
                    samples.append(sample)
                    conf = max(lowest_group(sample.confidences or (), window), 0.0)
                    confs.append(conf)
                    # The processor stops a trace once a full window is below the
                    # threshold; such a trace does not vote (it ended mid-thought).
                    was_stopped = len(sample.token_ids) >= window and conf < threshold
                    stopped += was_stopped
                    voters.append(not was_stopped)
                    answers.append(analyse(ctx, [sample]).answers[0])
                    share = weighted_share(voting_classes(answers, confs, plan.votes, voters))
                    progress: dict[str, JSON] = {
                        "samples_done": len(samples) - plan.warmup,
                        "samples": rest,
                        "sample": {
                            "index": sample.index,
                            "tokens": len(sample.token_ids),
                            "finish_reason": sample.finish_reason,
                            "answer": answers[-1],
                            "confidence": round(conf, 6),
                            "votes": not was_stopped,
                        },
                        "leader_share": round(share, 6),
                    }
                    yield _progress(Progress(data={**progress, "round": rounds}), "online", plan)
                    if share >= plan.consensus:
                        break  # closing the stream aborts the traces still running
            # Traces cut by the consensus stop: their tokens were generated, so they count.
            for i in range(size):
                if i not in done:
                    aborted += 1
                    samples.append(
                        Sample(
                            index=len(samples),
                            token_ids=tuple(ids[i]),
                            finish_reason="abort",
                            confidences=tuple(cs[i]),
                        )
                    )
                    confs.append(0.0)
                    voters.append(False)
                    answers.append(None)

        analysed = analyse(ctx, samples)
        classes = voting_classes(answers, confs, plan.votes, voters)
        selection = select_weighted(classes, k)
        info: dict[str, JSON] = {
            "strategy": self.name,
            "samples": len(samples),
            "samples_budget": n,
            "engine_requests": 1 + rounds,
            "rounds": rounds,
            "round_size": plan.round_size,
            "schedule": "fixed" if plan.round_size is not None else "load",
            "round_sizes": list(sizes),
            "loads_seen": loads,
            "k": k,
            "scorer": None,
            "vote": plan.votes.vote,
            "variant": plan.variant,
            "warmup": plan.warmup,
            "threshold": round(threshold, 6),
            "window": window,
            "top_k": top_k,
            "consensus": round(share, 6),
            "consensus_target": plan.consensus,
            "stopped_early": stopped,
            "aborted_at_consensus": aborted,
            "sample_confidences": [round(c, 6) for c in confs],
            "sample_voted": voters,
            **_savings(samples, voters, n),
        }
        if warm.plan is not None:
            info["per_sample_budget"] = {
                "thinking": warm.plan.thinking,
                "solution": warm.plan.solution,
                "mode": warm.mode,
            }
        yield final_event(ctx, analysed, confs, classes, selection, warm.plan, info)


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
