"""Paths of a step search and how they grow: one engine round per step, PRM scores (the
answers after them: ``strategies.search.path_answers``).

A *path* is a prefix of reasoning steps generated after the prompt. Each round extends
every live path by one step: the live paths are submitted together (one engine request
per distinct path, with ``n`` = the candidates it needs, all awaited at once so the
engine batches them; a path's ids are its request's prompt, so the prefix shared with
its siblings and parent is in vLLM's prefix cache), and every new step is scored by the
PRM in one batched call. Token ids throughout: nothing is re-tokenised between steps.

With the option ``confidence`` (alpha > 0) a step's reward is the PRM's times
``exp(alpha * mean log-probability of the step's tokens)``, the generator's own
confidence in the step (asked of the engine with the step: its sampled tokens'
logprobs, no extra call): on the testbed's long questions it marks wrong steps better
than the PRM alone (benchmarks/results/step_confidence/step-confidence.md), though it did
not lift the searches there (benchmarks/results/search/confidence.md).

Budgets hold per path: a step may not take the path's thinking past the thinking
budget (the step's ``max_tokens``); a path that reaches it is closed by the gateway
(``</think>`` appended, not generated), as a budget-forced path; the answer is then
generated under the solution budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from core.base import StrategyContext
from core.engine import GenerateRequest, ModelTokens, Sample, SamplingConfig
from core.errors import BackendError
from strategies.prm import RESOURCE_KEY as PRM_KEY
from strategies.prm import ProcessRewardModel
from strategies.reasoning import Split, split_ids
from strategies.search_options import SearchOptions

# live: more steps to come; closed: the model ended its thinking (an answer follows);
# forced: thinking budget, max_steps or the search's end closed it (``</think>`` is
# appended, then the answer); ended: the model stopped (EOS) or the context is full
# (nothing follows: its content, if any, is what it wrote).
PathState = Literal["live", "closed", "forced", "ended"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Path:
    ids: tuple[int, ...] = ()  # generated after the prompt, delimiters included
    steps: tuple[tuple[int, ...], ...] = ()  # each step as the PRM sees it (no delimiter)
    rewards: tuple[float, ...] = ()  # the PRM's reward of each scored step
    # The mean logprob of each generated step's tokens, one per generated step (0.0 when
    # the engine was not asked for logprobs: option confidence 0). A closing step the
    # gateway appends (score_closings) has none.
    confidences: tuple[float, ...] = ()
    state: PathState = "live"
    finish: Literal["stop", "length"] = "stop"  # how the model's last call ended

    @property
    def live(self) -> bool:
        return self.state == "live"


@dataclass(slots=True)
class Ledger:
    """What the search spent: every generated token (pruned paths included), engine
    requests, the prompt tokens the engine was handed (before its prefix cache) and the
    PRM's input tokens."""

    completion_tokens: int = 0
    reasoning_tokens: int = 0
    engine_requests: int = 0
    engine_prompt_tokens: int = 0
    prm_calls: int = 0
    prm_tokens: int = 0
    seed_offset: int = 0  # seeded requests: child j of a request gets seed + offset + j
    rounds_planned: int = 0  # engine rounds built so far (names their requests)
    # speculate: candidates whose next step was drawn while the PRM scored them, and
    # whose step was used (kept by the rule) or generated for nothing (dropped).
    ahead_used: int = 0
    ahead_dropped: int = 0
    candidates: list[int] = field(default_factory=list)  # per step
    step_tokens: list[int] = field(default_factory=list)  # per step, all candidates
    answer_tokens: int = 0
    engine_s: float = 0.0  # wall time waiting for the engine (steps and answers)
    prm_s: float = 0.0  # wall time waiting for the PRM
    survivors: list[int] = field(default_factory=list)  # per step, live paths after it


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPlan:
    """How one step is generated: stops at the delimiter and at the end of thinking."""

    stop_token_ids: tuple[int, ...]
    stop: tuple[str, ...]
    delimiter_ids: tuple[int, ...]


def step_plan(tokens: ModelTokens, delimiter: str | None) -> StepPlan:
    """Stop tokens where a delimiter is one token (the fast path: no detokenising in the
    engine), stop strings otherwise; ``None``: steps end only at the end of thinking
    (or their token cap)."""
    delimiter_ids = tuple(tokens.encode(delimiter)) if delimiter else ()
    stop_ids: list[int] = []
    stop: list[str] = []
    if len(delimiter_ids) == 1:
        stop_ids.append(delimiter_ids[0])
    elif delimiter:
        stop.append(delimiter)
    if tokens.think_end_id is not None:
        stop_ids.append(tokens.think_end_id)
    elif tokens.think_end_ids:
        stop.append(tokens.decode(tokens.think_end_ids) or "")
    return StepPlan(
        stop_token_ids=tuple(stop_ids),
        stop=tuple(s for s in stop if s),
        delimiter_ids=delimiter_ids,
    )


def split_of(ctx: StrategyContext, ids: Sequence[int]) -> Split:
    return split_ids(ids, ctx.engine.tokens, thinking_open=ctx.request.thinking_open)


def thinking_used(ctx: StrategyContext, path: Path) -> int:
    split = split_of(ctx, path.ids)
    return split.reasoning_tokens if ctx.request.thinking_open or split.think_closed else 0


def room_after(ctx: StrategyContext, ids: Sequence[int]) -> int:
    """Tokens a path of ``ids`` may still generate: the context's room, and the client's
    ``max_tokens``, which caps each path (thinking and answer) as it caps each sample of
    the sampling strategies."""
    left = ctx.engine.max_model_len - len(ctx.request.prompt_token_ids) - len(ids)
    limit = ctx.request.sampling.max_tokens
    return left if limit is None else min(left, limit - len(ids))


def _room(ctx: StrategyContext, path: Path) -> int:
    """What a path's next step may take: the generator's room, and the PRM's (a PRM
    that reads fewer positions than the generator serves, as the default one does)."""
    left = room_after(ctx, path.ids)
    prm = ctx.resources.get(PRM_KEY)
    if prm is None or prm.max_len is None:
        return left
    # The PRM reads the prompt, each step and its tag; the next step adds its tag and a
    # path the gateway closes adds its closing step (the end delimiter and a tag).
    read = len(ctx.request.prompt_token_ids) + sum(len(step) + 1 for step in path.steps)
    closing = len(ctx.engine.tokens.think_end_ids) + 1
    return min(left, prm.max_len - read - 1 - closing)


def _step_tokens(ctx: StrategyContext, path: Path, options: SearchOptions) -> int:
    """The next step's ``max_tokens``: the step cap, the context, the thinking budget."""
    cap = min(options.max_step_tokens, _room(ctx, path))
    budget = ctx.request.budget.thinking
    if budget is not None and ctx.engine.tokens.think_end_ids:
        cap = min(cap, budget - thinking_used(ctx, path))
    return cap


def sampling_of(ctx: StrategyContext, ledger: Ledger, **changes: object) -> SamplingConfig:
    base = ctx.request.sampling
    seed = None if base.seed is None else base.seed + ledger.seed_offset
    return replace(base, seed=seed, logprobs=False, top_logprobs=0, **changes)  # type: ignore[arg-type]


def grow(
    ctx: StrategyContext, plan: StepPlan, parent: Path, sample: Sample, *, reads_prm: bool = True
) -> Path:
    """``parent`` extended by one generated step (``reads_prm``: the path's steps are
    bounded by the PRM's context too, see :func:`settle`)."""
    gen = tuple(sample.token_ids)
    ids = parent.ids + gen
    before, after = split_of(ctx, parent.ids), split_of(ctx, ids)
    closed = after.think_closed and not before.think_closed
    step = gen
    if closed:
        # The closing step is the thinking this call added and the end delimiter: the
        # PRM judges the end of thinking too (whether it reached the answer; a path that
        # skips the question's last operations and closes looks right line by line).
        added = tuple(after.reasoning_ids[len(before.reasoning_ids) :])
        step = added + ctx.engine.tokens.think_end_ids
    elif plan.delimiter_ids and step[-len(plan.delimiter_ids) :] == plan.delimiter_ids:
        step = step[: -len(plan.delimiter_ids)]
    state: PathState = "live"
    if closed:
        state = "closed"
    elif sample.finish_reason == "stop" and sample.stop_reason is None:
        state = "ended"  # EOS
    finish: Literal["stop", "length"] = "length" if sample.finish_reason == "length" else "stop"
    steps = parent.steps + ((step,) if step else ())
    confidences = parent.confidences
    if step:
        lps = sample.logprobs or ()
        confidences += (sum(t.logprob for t in lps) / len(lps) if lps else 0.0,)
    path = Path(
        ids=ids,
        steps=steps,
        rewards=parent.rewards,
        confidences=confidences,
        state=state,
        finish=finish,
    )
    return settle(ctx, path, reads_prm=reads_prm)


def settle(ctx: StrategyContext, path: Path, *, reads_prm: bool = True) -> Path:
    """A live path that can take no further step: ``forced`` when its thinking budget is
    spent or (``reads_prm``: a search the PRM scores) the PRM can read no further step
    (the answer still follows), ``ended`` when the context is full."""
    if not path.live:
        return path
    if room_after(ctx, path.ids) <= 0:
        return replace(path, state="ended", finish="length")
    end = ctx.engine.tokens.think_end_ids
    if reads_prm and _room(ctx, path) <= 0:
        return (
            replace(path, state="forced") if end else replace(path, state="ended", finish="length")
        )
    budget = ctx.request.budget.thinking
    closable = budget is not None and bool(end)
    if closable and budget is not None and thinking_used(ctx, path) >= budget:
        return replace(path, state="forced")
    return path


def thinking_request(
    ctx: StrategyContext,
    ledger: Ledger,
    plan: StepPlan,
    *,
    request_id: str,
    ids: Sequence[int],
    n: int,
    max_tokens: int,
    logprobs: bool,
) -> GenerateRequest:
    """``n`` continuations of the thinking ``ids`` (a step, or a tree's segment), stopped
    by ``plan``, seeded from the ledger; ``logprobs``: with their sampled tokens' logprobs."""
    sampling = sampling_of(
        ctx,
        ledger,
        n=n,
        max_tokens=max_tokens,
        stop=plan.stop,
        stop_token_ids=plan.stop_token_ids,
        extra_args={},
        structured=None,  # thinking: the grammar is the answer's (answer())
        token_logprobs=0 if logprobs else None,
    )
    ledger.seed_offset += n
    return GenerateRequest(
        request_id=request_id,
        prompt_token_ids=ctx.request.prompt_token_ids + tuple(ids),
        sampling=sampling,
        thinking_only=True,  # the answer is answer()'s call
    )


@dataclass(frozen=True, slots=True)
class Round:
    """One engine round's requests, built before it is sent: seeds are given out as
    rounds are built, so a seeded search draws alike whatever runs beside it."""

    parents: tuple[Path, ...]
    per_parent: int
    members: tuple[tuple[int, ...], ...]  # per request: the parents (by index) it serves
    requests: tuple[GenerateRequest, ...]


def plan_round(
    ctx: StrategyContext,
    plan: StepPlan,
    options: SearchOptions,
    parents: Sequence[Path],
    per_parent: int,
    ledger: Ledger,
) -> Round:
    """The requests of one step of ``parents`` (``per_parent`` candidates each). Parents
    with the same ids (resampled particles) share one request. Every parent must be
    live and :func:`settle`\ d (it has room for a step)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(parents):
        groups.setdefault(p.ids, []).append(i)
    requests: list[GenerateRequest] = []
    ledger.rounds_planned += 1
    for g, members in enumerate(groups.values()):
        parent = parents[members[0]]
        requests.append(
            thinking_request(
                ctx,
                ledger,
                plan,
                request_id=f"{ctx.request.request_id}-s{ledger.rounds_planned}-{g}",
                ids=parent.ids,
                n=per_parent * len(members),
                max_tokens=_step_tokens(ctx, parent, options),
                # The sampled tokens' own logprobs, for the confidence in step rewards.
                logprobs=options.confidence > 0 or options.reward == "certainty",
            )
        )
    return Round(
        parents=tuple(parents),
        per_parent=per_parent,
        members=tuple(tuple(m) for m in groups.values()),
        requests=tuple(requests),
    )


async def send_round(ctx: StrategyContext, round_: Round) -> list[list[Sample]]:
    """The round's samples, per request (one engine submission)."""
    return await ctx.engine.generate_batch(list(round_.requests))


def grow_round(
    ctx: StrategyContext,
    plan: StepPlan,
    round_: Round,
    results: Sequence[Sequence[Sample]],
    ledger: Ledger,
    *,
    same_step: bool = False,
) -> list[list[Path]]:
    """Every parent's candidates from the round's samples, in parent order; every token
    counted. ``same_step``: the round adds to the step the ledger holds last (a step
    drawn in two rounds) instead of opening one."""
    parents, per_parent = round_.parents, round_.per_parent
    out: list[list[Path]] = [[] for _ in parents]
    for members, req, samples in zip(round_.members, round_.requests, results, strict=True):
        if len(samples) != req.sampling.n:
            raise BackendError(f"engine returned {len(samples)} of {req.sampling.n} samples")
        ledger.engine_requests += 1
        ledger.engine_prompt_tokens += len(req.prompt_token_ids)
        for j, sample in enumerate(samples):
            parent = parents[members[j // per_parent]]
            child = grow(ctx, plan, parent, sample)
            count_tokens(ctx, ledger, parent, child)
            out[members[j // per_parent]].append(child)
    candidates = sum(len(c) for c in out)
    tokens = sum(len(c.ids) - len(parents[i].ids) for i, group in enumerate(out) for c in group)
    if same_step and ledger.candidates:
        ledger.candidates[-1] += candidates
        ledger.step_tokens[-1] += tokens
    else:
        ledger.candidates.append(candidates)
        ledger.step_tokens.append(tokens)
    return out


async def expand(
    ctx: StrategyContext,
    plan: StepPlan,
    options: SearchOptions,
    parents: Sequence[Path],
    per_parent: int,
    ledger: Ledger,
) -> list[list[Path]]:
    """One step: ``per_parent`` candidates of every parent, in parent order, in one
    engine round (:func:`plan_round`, :func:`send_round`, :func:`grow_round`)."""
    round_ = plan_round(ctx, plan, options, parents, per_parent, ledger)
    t0 = time.perf_counter()
    results = await send_round(ctx, round_)
    ledger.engine_s += time.perf_counter() - t0
    return grow_round(ctx, plan, round_, results, ledger)


def count_tokens(ctx: StrategyContext, ledger: Ledger, parent: Path, child: Path) -> None:
    new = len(child.ids) - len(parent.ids)
    ledger.completion_tokens += new
    before = split_of(ctx, parent.ids)
    after = split_of(ctx, child.ids)
    if ctx.request.thinking_open or after.think_closed or before.think_closed:
        ledger.reasoning_tokens += after.reasoning_tokens - before.reasoning_tokens


async def score(
    ctx: StrategyContext,
    prm: ProcessRewardModel | None,
    paths: Sequence[Path],
    ledger: Ledger,
    *,
    confidence: float = 0.0,
) -> list[Path]:
    """Paths whose last step has no reward yet get one (one batched PRM call), times
    ``exp(confidence * the step's mean logprob)`` where the step has one. Without a PRM
    (``reward: certainty``) a step's reward is ``exp(its mean logprob)``."""
    todo = [i for i, p in enumerate(paths) if len(p.steps) > len(p.rewards)]
    if not todo:
        return list(paths)
    if prm is None:
        return [
            replace(p, rewards=tuple(math.exp(c) for c in p.confidences)) if i in todo else p
            for i, p in enumerate(paths)
        ]
    prompt = ctx.request.prompt_token_ids
    t0 = time.perf_counter()
    rewards = await prm.score_paths(prompt, [paths[i].steps for i in todo])
    ledger.prm_s += time.perf_counter() - t0
    ledger.prm_calls += 1
    # What the PRM was asked: copies of a path go once (ProcessRewardModel.score_paths).
    asked = {tuple(prm.sequence(prompt, paths[i].steps)) for i in todo}
    ledger.prm_tokens += sum(len(seq) for seq in asked)
    out = list(paths)
    for i, r in zip(todo, rewards, strict=True):
        p = paths[i]
        # exp(0) = 1 where a step has no confidence (alpha 0, a closing the gateway added).
        conf = (*p.confidences, *(0.0,) * (len(r) - len(p.confidences)))
        combined = [x * math.exp(confidence * c) for x, c in zip(r, conf, strict=False)]
        out[i] = replace(p, rewards=tuple(combined))
    return out


def force_close(paths: Sequence[Path]) -> list[Path]:
    """Live paths at the search's end are closed by the gateway (``forced``)."""
    return [replace(p, state="forced") if p.live else p for p in paths]


async def score_closings(
    ctx: StrategyContext,
    prm: ProcessRewardModel | None,
    paths: Sequence[Path],
    ledger: Ledger,
    *,
    confidence: float = 0.0,
) -> list[Path]:
    """Paths the gateway closed get the closing step a model-closed path has (the end
    delimiter, scored by the PRM), so that every finished path is judged on its end.
    Without a PRM there is nothing to judge a closing the model did not write by."""
    end = ctx.engine.tokens.think_end_ids
    if not end or prm is None:
        return list(paths)
    closing = [replace(p, steps=(*p.steps, end)) if p.state == "forced" else p for p in paths]
    return await score(ctx, prm, closing, ledger, confidence=confidence)
