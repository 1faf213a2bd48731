"""The sample pool, the building block of every multi-sample strategy: how many samples a
request asks for and the checks they share (``validate_common``), drawing them as ONE
engine request (``start_draw``/``draw``: a progress event per finished sample), reading
them (``analyse``), scoring, and the final event from a selection (``final_event``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Final

from core import options
from core.base import (
    JSON,
    BudgetName,
    Choice,
    Progress,
    ResourceKey,
    Result,
    StrategyContext,
    StrategyRequest,
    Usage,
    budget_cuts,
)
from core.engine import (
    Engine,
    ExtraArg,
    FinishReason,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    SamplingConfig,
    TokenLogprob,
)
from core.errors import BackendError, BackendUnavailable, InvalidBudget, InvalidRequest
from strategies import elastic_plan
from strategies.answers import extract_answer
from strategies.elastic_plan import ElasticPlan
from strategies.json_answers import answer_field, json_answer
from strategies.logprobs import Texts
from strategies.reasoning import Split, split_ids
from strategies.scorers import SCORER_KINDS, ScoreQuery, Scorer
from strategies.selection import AnswerClass, Selection
from strategies.tool_calls import vote_key
from strategies.voting import OPTIONS as VOTE_OPTIONS
from strategies.voting import (
    vote_options,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingDefaults:
    """Server settings of the sampling strategies (``Resources`` item ``"sampling"``)."""

    samples: int = 8  # N when the request sets no samples budget
    alpha: float = 0.02  # Best-of-Majority frequency threshold
    # The server's default scorer when the scorer set cannot hold it: "prm", the step
    # searches' PRM, is attached by a builder of its own (None: the set's default).
    scorer: str | None = None


DEFAULTS_KEY: Final = ResourceKey("sampling", SamplingDefaults)


def defaults_of(ctx: StrategyContext) -> SamplingDefaults:
    return ctx.resources.get(DEFAULTS_KEY) or SamplingDefaults()


def requested_k(request: StrategyRequest) -> int:
    """Answers to return: the ``k`` budget, else the OpenAI ``n``; they must agree."""
    k = request.budget.k
    if k is None:
        return request.n
    if request.n not in (1, k):
        raise InvalidRequest(
            f"n={request.n} conflicts with the k budget {k}; set one of them", param="n"
        )
    return k


def requested_samples(request: StrategyRequest, defaults: SamplingDefaults) -> int:
    return request.budget.samples if request.budget.samples is not None else defaults.samples


def option_alpha(request: StrategyRequest) -> float | None:
    """The body field ``alpha`` (a fraction of N in [0, 1]); None when absent."""
    return options.number(request.options, "alpha", None, lo=0.0, hi=1.0)


def option_scorer(request: StrategyRequest) -> str | None:
    """The body field ``scorer``: one of ``SCORER_KINDS``; None when absent."""
    if request.options.get("scorer") is None:
        return None
    return options.choice(request.options, "scorer", "", SCORER_KINDS)


def validate_common(
    request: StrategyRequest,
    engine: Engine,
    *,
    uses_scorer: bool,
    uses_alpha: bool = False,
    uses_vote: bool = False,
) -> None:
    """Checks shared by the sampling strategies (before any engine call)."""
    if uses_vote:
        vote_options(request)
    elif any(name in request.options for name in VOTE_OPTIONS):
        name = next(n for n in VOTE_OPTIONS if n in request.options)
        raise InvalidRequest(f"{name} applies to self-consistency and deepconf only", param=name)
    samples, k = request.budget.samples, requested_k(request)
    if samples is not None and samples < 1:
        raise InvalidBudget("samples must be >= 1", param="samples")
    if k < 1:
        raise InvalidBudget("k must be >= 1", param="k")
    if samples is not None and k > samples:
        raise InvalidBudget(f"k={k} exceeds samples={samples}", param="k")
    if uses_scorer:
        option_scorer(request)
    elif "scorer" in request.options:
        raise InvalidRequest("this strategy uses no scorer", param="scorer")
    if uses_alpha:
        option_alpha(request)
    elif "alpha" in request.options:
        raise InvalidRequest("alpha applies to best-of-majority only", param="alpha")
    if has_token_budget(request):
        elastic_plan.plan(request, engine)  # budgets that cannot be honoured: 400 now
        elastic_plan.requested_mode(request, engine)


def has_token_budget(request: StrategyRequest) -> bool:
    b = request.budget
    return b.thinking is not None or b.solution is not None or b.thinking_min is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Draw:
    """How the pool is drawn: the engine deltas of all ``n`` samples, and the
    per-sample elastic plan when thinking/solution budgets apply."""

    n: int
    deltas: AsyncGenerator[SampleDelta, None]
    plan: ElasticPlan | None
    mode: str  # "plain", or the elastic mode ("one-pass" / "two-pass")
    engine_requests: int


def start_draw(
    ctx: StrategyContext,
    n: int,
    *,
    logprobs: bool,
    top_logprobs: int = 0,
    extra_args: Mapping[str, ExtraArg] | None = None,
    suffix: str = "pool",
    first: int = 0,
) -> Draw:
    """Open the engine stream of ``n`` samples: ONE request with ``n = N``.

    ``first``: how many samples of this request's pool earlier draws made. A seeded
    engine request gives child ``j`` the seed ``seed + j``, so a later draw starts its
    seeds at ``seed + first``: otherwise it would repeat the earlier draw's samples.

    With thinking/solution budgets every sample is budgeted exactly as the
    ``elastic`` strategy budgets its trajectory (same plan, same processor); an engine
    without the processor falls back to elastic's two-pass mode (one thinking request
    with ``n = N``, then one answer request per sample). ``top_logprobs`` asks for
    per-token confidences; ``extra_args`` go to other processors of the engine (DeepConf's
    threshold) next to elastic's.
    """
    request, engine = ctx.request, ctx.engine
    n = ctx.allowance.samples(n)  # the request's ceiling: each sample keeps an answer's room
    widened = replace(request, n=n)
    extra = dict(extra_args or {})

    def one_request(base: SamplingConfig) -> AsyncGenerator[SampleDelta, None]:
        sampling = replace(
            base,
            n=n,
            seed=None if base.seed is None else base.seed + first,
            logprobs=logprobs or base.logprobs,
            top_logprobs=top_logprobs,
            extra_args={**base.extra_args, **extra},
        )
        gen = GenerateRequest(
            request_id=f"{request.request_id}-{suffix}",
            prompt_token_ids=request.prompt_token_ids,
            sampling=sampling,
            visible=False,  # samples reach the client only once chosen
        )
        return engine.stream(gen)

    if not has_token_budget(request):
        deltas = one_request(request.sampling)
        return Draw(n=n, deltas=deltas, plan=None, mode="plain", engine_requests=1)
    p = elastic_plan.plan(widened, engine)
    mode = elastic_plan.requested_mode(widened, engine)
    if mode == "one-pass":
        return Draw(n=n, deltas=one_request(p.sampling), plan=p, mode=mode, engine_requests=1)
    if top_logprobs or extra:
        raise BackendUnavailable(
            "confidence votes and early stops need one-pass budgets (an engine with the "
            "elastic logits processor)",
            param="strategy",
            code="resource_unavailable",
        )
    if request.sampling.token_logprobs is not None:
        raise InvalidRequest(
            "logprobs under token budgets need one-pass budgets (an engine with the "
            "elastic logits processor): two passes sample the answer apart from its thinking",
            param="logprobs",
        )
    if logprobs:
        # Two passes give two partial logprob sums per sample; no honest mean exists.
        raise InvalidRequest(
            "the logprob scorer needs one-pass budgets (an engine with the elastic "
            "logits processor)",
            param="scorer",
        )
    return Draw(
        n=n,
        deltas=elastic_plan.two_pass(engine, widened, p),
        plan=p,
        mode=mode,
        engine_requests=1 + n,
    )


@dataclass(slots=True)
class Pool:
    """The samples of one request, filled by :func:`draw`."""

    samples: list[Sample]


# How often a draw reports its samples' lengths while they grow (the live view's bars).
GROWTH_EVERY_S = 0.25


async def draw(source: Draw, pool: Pool) -> AsyncIterator[Progress]:
    """Collect every sample of ``source`` into ``pool``, yielding
    ``{"samples_done": i, "samples": N, "sample": {...}}`` as each one finishes, and at
    most every ``GROWTH_EVERY_S`` (from that long after the start) ``{"growing": [tokens
    per sample], "samples": N}`` while they grow."""
    n = source.n
    report_at = time.monotonic() + GROWTH_EVERY_S
    ids: list[list[int]] = [[] for _ in range(n)]
    # Token confidences (top_logprobs > 0), per index. An index with tokens that came
    # without them (a token the engine did not sample, e.g. an injected </think>) gets
    # none: the rest would no longer line up with its token ids.
    confs: dict[int, list[float]] = {}
    bare: set[int] = set()
    # The client's logprobs, per index (one per token, as the engine sends them).
    lps: dict[int, list[TokenLogprob]] = {}
    done: dict[int, Sample] = {}
    # aclosing: a client that goes away closes this generator, and with it the engine
    # stream at once, which aborts all N samples in the engine.
    async with aclosing(source.deltas) as deltas:
        async for delta in deltas:
            i = delta.index
            if delta.redrawn:  # its server failed: the engine draws it again from scratch
                ids[i].clear()
                confs.pop(i, None)
                lps.pop(i, None)
                bare.discard(i)
                continue
            if delta.logprobs is not None:
                lps.setdefault(i, []).extend(delta.logprobs)
            ids[i].extend(delta.token_ids)
            if delta.confidences is not None and len(delta.confidences) == len(delta.token_ids):
                confs.setdefault(i, []).extend(delta.confidences)
            elif delta.token_ids:
                bare.add(i)
            if delta.finish_reason is not None and i not in done:
                done[i] = Sample(
                    index=i,
                    token_ids=tuple(ids[i]),
                    finish_reason=delta.finish_reason,
                    cumulative_logprob=delta.cumulative_logprob,
                    stop_reason=delta.stop_reason,
                    confidences=finished_confidences(i, ids[i], bare, confs),
                    logprobs=tuple(lps.get(i, ())) if delta.logprobs is not None else None,
                )
                sample: dict[str, JSON] = {
                    "index": i,
                    "tokens": len(ids[i]),
                    "finish_reason": delta.finish_reason,
                }
                yield Progress(data={"samples_done": len(done), "samples": n, "sample": sample})
            elif len(done) < n and (now := time.monotonic()) >= report_at:
                report_at = now + GROWTH_EVERY_S
                yield Progress(data={"growing": [len(x) for x in ids], "samples": n})
    if len(done) != n:
        # The engine contract says every index ends with a finish_reason.
        raise BackendError(f"engine finished {len(done)} of {n} samples")
    pool.samples = [done[i] for i in range(n)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysed:
    """A pool, split and read: per sample its thinking/answer split and answer."""

    samples: tuple[Sample, ...]
    splits: tuple[Split, ...]
    answers: tuple[str | None, ...]
    # Answers are canonical JSON (response_format): votes compare them exactly.
    exact: bool = False


def analyse(ctx: StrategyContext, samples: Sequence[Sample]) -> Analysed:
    tokens = ctx.engine.tokens
    splits = tuple(
        split_ids(s.token_ids, tokens, thinking_open=ctx.request.thinking_open) for s in samples
    )
    answers, exact = answer_keys(ctx.request, [tokens.decode(s.content_ids) for s in splits])
    return Analysed(samples=tuple(samples), splits=splits, answers=answers, exact=exact)


def answer_keys(
    request: StrategyRequest, texts: Sequence[str]
) -> tuple[tuple[str | None, ...], bool]:
    """What each answer text votes as, and whether votes compare exactly: the canonical
    JSON value under ``response_format`` (exact), a call's canonical (name, arguments)
    when tools are offered, else the extracted mathematical answer."""
    if request.sampling.structured is not None:
        field = answer_field(request)
        return tuple(json_answer(t, field) for t in texts), True
    if request.tools:  # a call votes as its canonical (name, arguments)
        return tuple(vote_key(t) or extract_answer(t) for t in texts), False
    return tuple(extract_answer(t) for t in texts), False


async def score(ctx: StrategyContext, scorer: Scorer, pool: Analysed) -> list[float]:
    query = ScoreQuery(
        prompt_token_ids=ctx.request.prompt_token_ids,
        samples=pool.samples,
        tokens=ctx.engine.tokens,
        thinking_open=ctx.request.thinking_open,
    )
    return await scorer.score(query)


def usage_of(ctx: StrategyContext, pool: Analysed) -> Usage:
    """Exact usage: the prompt once (one request, shared prefix), every sample's tokens."""
    return Usage(
        prompt_tokens=len(ctx.request.prompt_token_ids),
        completion_tokens=sum(len(s.token_ids) for s in pool.samples),
        reasoning_tokens=sum(s.reasoning_tokens for s in pool.splits),
    )


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def class_info(c: AnswerClass, total: int) -> dict[str, JSON]:
    return {
        "answer": c.answer,
        "count": c.count,
        "frequency": _round(c.frequency(total)),
        "mean_reward": _round(c.mean_reward),
    }


def finish_of(
    sample: Sample, split: Split, plan: ElasticPlan | None, tokens: ModelTokens
) -> FinishReason:
    """Honest finish_reason: ``length`` when the solution budget cut the answer."""
    reason = sample.finish_reason
    if plan is None or plan.solution is None or reason != "stop":
        return reason
    content = split.content_ids
    while content and content[-1] in tokens.eos_token_ids:
        content = content[:-1]
    answering = split.think_closed or not plan.thinking_open
    return "length" if answering and len(content) >= plan.solution else reason


def thinking_cut(split: Split, plan: ElasticPlan) -> bool:
    """Whether the thinking budget ended this sample's thinking."""
    return plan.thinking_open and (
        not split.think_closed or split.reasoning_tokens >= plan.thinking
    )


def budget_info(ctx: StrategyContext, pool: Analysed, source: Draw) -> dict[str, JSON]:
    """The per-sample elastic budgets as applied, and how often they cut."""
    p = source.plan
    assert p is not None
    cut = sum(1 for sp in pool.splits if thinking_cut(sp, p))
    return {
        "thinking": p.thinking,
        "solution": p.solution,
        "mode": source.mode,
        "thinking_cut": cut,
    }


def final_event(
    ctx: StrategyContext,
    pool: Analysed,
    rewards: Sequence[float] | None,
    classes: Sequence[AnswerClass],
    selection: Selection,
    plan: ElasticPlan | None,
    info: dict[str, JSON],
) -> Result:
    """The response: one choice per chosen class (its representative sample), best
    first, and the ``thinkgate`` object describing every class."""
    total = len(pool.samples)
    tokens = ctx.engine.tokens
    picks: list[tuple[int, AnswerClass | None]] = [(c.representative, c) for c in selection.chosen]
    rule: str = selection.rule
    fallback = selection.fallback
    if not picks:
        # No sample stated an answer: return the best-scored (else first) sample.
        best = max(range(total), key=lambda i: (rewards[i], -i)) if rewards else 0
        picks = [(best, None)]
        rule, fallback = "no-answer", "no sample contained an extractable answer"
    choices = []
    texts = Texts(tokens)
    for rank, (i, cls) in enumerate(picks):
        split, sample = pool.splits[i], pool.samples[i]
        choice_info: dict[str, JSON] = {"sample_index": i, "answer": pool.answers[i]}
        if rewards is not None:
            choice_info["reward"] = _round(rewards[i])
        if cls is not None:
            choice_info.update(class_info(cls, total))
        finish = finish_of(sample, split, plan, tokens)
        cuts: tuple[BudgetName, ...] | None = None
        if plan is not None:  # counted by the budget cut-in metric
            cuts = budget_cuts(thinking=thinking_cut(split, plan), solution=finish == "length")
        choices.append(
            Choice(
                index=rank,
                reasoning=tokens.decode(split.reasoning_ids),
                content=tokens.decode(split.content_ids),
                finish_reason=finish,
                info=choice_info,
                budget_cut=cuts,
                logprobs=None if sample.logprobs is None else texts.entries(sample.logprobs),
            )
        )
    chosen = {c.first_seen for c in selection.chosen}
    info = {
        **info,
        "rule": rule,
        "fallback": fallback,
        "unanswered": sum(1 for a in pool.answers if a is None),
        "classes": [{**class_info(c, total), "selected": c.first_seen in chosen} for c in classes],
        # Per sample, in engine order: what usage sums (clients can audit it).
        "sample_tokens": [len(s.token_ids) for s in pool.samples],
        "sample_reasoning_tokens": [sp.reasoning_tokens for sp in pool.splits],
        "sample_answers": list(pool.answers),
        "sample_rewards": [_round(r) for r in rewards] if rewards is not None else None,
    }
    return Result(choices=tuple(choices), usage=usage_of(ctx, pool), samples=total, info=info)


def finished_confidences(
    i: int, ids: Sequence[int] | None, bare: set[int], confs: dict[int, list[float]]
) -> tuple[float, ...] | None:
    """A finished sample's confidences: None when tokens came without them (the engine
    did not report them), empty for a sample with no tokens at all (a deadline ended it
    before its first)."""
    if i in bare or (i not in confs and ids):
        return None
    return tuple(confs.get(i, ()))
