"""``budget-guidance``: soft steering of thinking toward a budget B (docs/specs.md §2).

Every trajectory is decoded in ONE engine pass by an engine whose model is the
budget-guidance wrapper (hidden states reach the logits processor in the same step,
:mod:`kernels.guidance.vllm_v1`): at line boundaries while thinking, the next-token
distribution becomes ``p(v) * Pr(L <= b | v)`` with ``b = max(1, B - thinking tokens so
far)``, where a Gamma predictor gives the remaining thinking length ``L`` after ``v``.

Budgets (``X-Budget-*`` headers or ``budget`` body fields):

* ``thinking`` = B. ``None`` or 0 means no guidance: decoding is the model's own (the
  spec: B <= 0 disables guidance).
* ``solution``: a cap on answer tokens, enforced by the elastic processor after
  ``</think>``.
* ``samples``: N > 1 draws N guided samples in one engine request (shared prefix) and
  returns the majority answer (``strategies.selection``), with progress events while
  streaming. With N = 1 the request's ``n`` trajectories stream live.

Option (body field) ``hard_cap_factor`` (number >= 1): also force ``</think>`` after
``ceil(B * factor)`` thinking tokens through the elastic processor (guidance is soft
and can overrun B; the cap bounds the overrun). ``guidance_mask`` (bool, default true):
the spec's reliability mask on the predictor's (alpha, lambda).

An engine without the predictor (plain architecture) or without the processor answers
503 before any engine call: guidance is never silently skipped.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import ClassVar

from core import options
from core.base import JSON, StrategyContext, StrategyEvent, StrategyRequest
from core.budget import Budget
from core.engine import Engine, ExtraArg, FinishReason, GenerateRequest, SamplingConfig
from core.errors import BackendUnavailable, InvalidBudget, InvalidRequest
from kernels.guidance import args as guidance_args
from strategies import elastic_plan
from strategies.elastic_plan import ElasticPlan
from strategies.pool import Draw, Pool, analyse, draw, final_event
from strategies.selection import build_classes, select_majority
from strategies.trajectories import Ending, Trajectory, TrajectorySet

PROCESSOR = guidance_args.PROCESSOR_NAME


@dataclass(frozen=True, slots=True, kw_only=True)
class GuidancePlan:
    """How one request is decoded: guidance budget, optional caps, engine settings."""

    budget: int | None  # B; None: unguided
    hard_cap: int | None  # elastic thinking cap, when hard_cap_factor or solution is set
    elastic: ElasticPlan | None
    sampling: SamplingConfig  # n is set per call
    mask: bool


def _option_factor(request: StrategyRequest) -> float | None:
    return options.number(request.options, "hard_cap_factor", None, lo=1.0)


def _option_mask(request: StrategyRequest) -> bool:
    return options.flag(request.options, "guidance_mask", True)


def plan(request: StrategyRequest, engine: Engine) -> GuidancePlan:
    """The decoding plan; raises a ``GatewayError`` before any engine call."""
    if request.sampling.structured is not None and request.budget.solution is not None:
        # One pass ends a cut answer by forcing EOS, which the engine's grammar refuses
        # mid-JSON (vLLM fails the request); elastic answers in a second pass instead.
        raise InvalidRequest(
            "response_format (or a forced tool_choice) with a solution budget is not "
            "answered by budget-guidance, which decodes in one pass and would end the "
            "answer inside its JSON; drop the solution budget, or use elastic (two passes)",
            param="response_format",
        )
    if PROCESSOR not in engine.processors:
        raise BackendUnavailable(
            f"budget guidance is not available on model {engine.model_name!r}: the engine "
            "needs the budget-guidance logits processor and a model with a trained "
            "predictor (bg_predictor/; `thinkgate train-predictor`)"
        )
    b = request.budget
    if b.thinking is not None and b.thinking > guidance_args.MAX_BUDGET:
        raise InvalidBudget(
            f"thinking budget must be <= {guidance_args.MAX_BUDGET}", param="budget.thinking"
        )
    factor = _option_factor(request)
    mask = _option_mask(request)
    guided = b.thinking if b.thinking else None
    if factor is not None and guided is None:
        raise InvalidRequest(
            "hard_cap_factor needs a thinking budget (X-Budget-Thinking)", param="hard_cap_factor"
        )
    hard_cap = math.ceil(guided * factor) if guided is not None and factor is not None else None
    e_plan: ElasticPlan | None = None
    if hard_cap is not None or b.solution is not None:
        if elastic_plan.PROCESSOR not in engine.processors:
            raise InvalidRequest(
                "a hard cap or solution budget with budget-guidance needs the elastic "
                "logits processor on this engine",
                param="budget.solution" if hard_cap is None else "hard_cap_factor",
            )
        e_plan = elastic_plan.plan(request, engine, Budget(thinking=hard_cap, solution=b.solution))
        sampling = e_plan.sampling
    else:
        room = engine.max_model_len - len(request.prompt_token_ids)
        if room < 1:
            raise InvalidRequest("the prompt leaves no room to generate", param="messages")
        cap = request.sampling.max_tokens
        sampling = replace(request.sampling, max_tokens=min(cap, room) if cap else room)
    extra: dict[str, ExtraArg] = dict(sampling.extra_args)
    if guided is not None:
        extra.update(
            guidance_args.extra_args(guided, thinking_open=request.thinking_open, mask=mask)
        )
    return GuidancePlan(
        budget=guided,
        hard_cap=hard_cap,
        elastic=e_plan,
        sampling=replace(sampling, extra_args=extra),
        mask=mask,
    )


def _samples(request: StrategyRequest) -> int:
    samples = request.budget.samples if request.budget.samples is not None else 1
    if samples < 1:
        raise InvalidBudget("samples must be >= 1", param="budget.samples")
    if samples > 1 and request.n != 1:
        raise InvalidRequest(
            f"n={request.n} with samples={samples}: majority voting returns one choice",
            param="n",
        )
    return samples


class BudgetGuidance:
    """``budget-guidance``: Gamma-predictor steering toward a thinking budget."""

    name: ClassVar[str] = "budget-guidance"
    budget_fields: ClassVar[frozenset[str]] = frozenset({"thinking", "solution", "samples"})
    body_options: ClassVar[frozenset[str]] = frozenset({"hard_cap_factor", "guidance_mask"})
    streams_live: ClassVar[bool] = True  # with one sample; a vote streams progress events
    # Calls come after thinking: the guidance ends thinking, never a call (a solution cap
    # that cuts one is reported as cut); samples vote on calls as the sampling strategies.
    honours_tools: ClassVar[bool] = True
    # Guidance (and a hard cap's forced </think>) acts on thinking only; the grammar
    # starts after it. Not with a solution budget: see plan().
    honours_response_format: ClassVar[bool] = True

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        if request.n < 1:
            raise InvalidRequest(f"n must be at least 1, got {request.n}", param="n")
        _samples(request)
        plan(request, engine)

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[StrategyEvent, None]:
        request, engine = ctx.request, ctx.engine
        p = plan(request, engine)
        samples = _samples(request)
        if samples > 1:
            async for vote_event in self._vote(ctx, p, samples):
                yield vote_event
            return
        trajectories = TrajectorySet(engine.tokens, thinking_open=request.thinking_open)
        deltas = engine.stream(
            GenerateRequest(
                request_id=request.request_id,
                prompt_token_ids=request.prompt_token_ids,
                sampling=replace(p.sampling, n=request.n),
                visible=request.stream,
            )
        )
        # aclosing: a client that goes away closes the engine stream now (abort).
        async with aclosing(deltas):
            async for delta in deltas:
                event = trajectories.push(delta)
                if event is not None and request.stream:
                    yield event
        yield trajectories.final(
            len(request.prompt_token_ids), lambda traj: _outcome(traj, p), _plan_info(p)
        )

    async def _vote(
        self, ctx: StrategyContext, p: GuidancePlan, samples: int
    ) -> AsyncIterator[StrategyEvent]:
        request = ctx.request
        gen = GenerateRequest(
            request_id=f"{request.request_id}-pool",
            prompt_token_ids=request.prompt_token_ids,
            sampling=replace(p.sampling, n=samples),
            visible=False,  # samples reach the client only once chosen
        )
        source = Draw(
            n=samples,
            deltas=ctx.engine.stream(gen),
            plan=p.elastic,
            mode="guided",
            engine_requests=1,
        )
        pool = Pool(samples=[])
        progress_events = draw(source, pool)
        try:
            async for progress in progress_events:
                yield progress
        finally:
            # Closed early (client gone): close the engine stream now, which aborts it.
            for stream in (progress_events, source.deltas):
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
        analysed = analyse(ctx, pool.samples)
        classes = build_classes(analysed.answers, None, exact=analysed.exact)
        selection = select_majority(classes, 1)
        within = _within(p, [s.reasoning_tokens for s in analysed.splits])
        info: dict[str, JSON] = {
            "strategy": self.name,
            "samples": samples,
            "engine_requests": 1,
            **_plan_info(p),
            "within_budget": within,
        }
        yield final_event(ctx, analysed, None, classes, selection, p.elastic, info)


def _within(p: GuidancePlan, thinking: list[int]) -> int | None:
    """How many trajectories kept their thinking within B (None: unguided)."""
    if p.budget is None:
        return None
    return sum(1 for t in thinking if t <= p.budget)


def _plan_info(p: GuidancePlan) -> dict[str, JSON]:
    return {
        "thinking_budget": p.budget,
        "guided": p.budget is not None,
        "hard_cap": p.hard_cap,
        "solution_budget": p.elastic.solution if p.elastic is not None else None,
        "guidance_mask": p.mask,
    }


def _outcome(traj: Trajectory, p: GuidancePlan) -> Ending:
    reason: FinishReason = traj.finish_reason or "abort"
    info: dict[str, JSON] = {
        "thinking_tokens": traj.reasoning_tokens,
        "answer_tokens": traj.content_tokens,
        "within_budget": (
            traj.think_closed and traj.reasoning_tokens <= p.budget
            if p.budget is not None
            else None
        ),
    }
    if p.elastic is None:
        return Ending(reason, info)
    end = elastic_plan.outcome(traj, p.elastic)
    info["cut"] = end.info["cut"]
    info["solution_cut"] = end.info["solution_cut"]
    return Ending(end.finish_reason, info, end.budget_cut)
