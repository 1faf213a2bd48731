"""Elastic budgets as a building block: the plan (thinking and solution budgets as one
engine request's settings), the honest outcome of a trajectory under it, and the two-call
fallback for engines without the elastic logits processor. ``elastic`` runs one plan;
the sampling strategies, budget guidance and deepconf apply one to each of their samples.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Final

from core import options
from core.base import JSON, StrategyRequest, budget_cuts
from core.budget import Budget
from core.engine import Engine, FinishReason, GenerateRequest, SampleDelta, SamplingConfig
from core.errors import InvalidBudget, InvalidRequest, first_error
from kernels.elastic import args as elastic_args
from kernels.sequence import SequenceMatcher
from strategies.trajectories import Ending, Trajectory

PROCESSOR: Final = elastic_args.PROCESSOR_NAME  # as Engine.processors reports it


MODES: Final = ("auto", "one-pass", "two-pass")


def requested_mode(request: StrategyRequest, engine: Engine) -> str:
    """Body field ``elastic_mode``: ``auto`` (default: one pass when the engine has the
    processor), ``one-pass`` (400 without it) or ``two-pass`` (always the fallback)."""
    mode = options.choice(request.options, "elastic_mode", "auto", MODES)
    if request.sampling.structured is not None and request.budget.solution is not None:
        # One pass ends a cut answer by forcing EOS, which the engine's grammar refuses
        # mid-JSON (vLLM fails the request); the second pass's max_tokens cuts it cleanly.
        if mode == "one-pass":
            raise InvalidRequest(
                "response_format with a solution budget is answered in two passes (the "
                "answer's grammar cannot end early); use elastic_mode auto or two-pass",
                param="elastic_mode",
            )
        return "two-pass"
    has_processor = PROCESSOR in engine.processors
    if request.budget.thinking_min and not has_processor:
        raise InvalidRequest(
            "a thinking minimum is held inside the engine: this engine has no elastic "
            "logits processor",
            param="budget.thinking_min",
        )
    if request.budget.thinking_min and mode == "two-pass":
        raise InvalidRequest(
            "a thinking minimum needs one-pass budgets; use elastic_mode auto or one-pass",
            param="budget.thinking_min",
        )
    if mode == "one-pass" and not has_processor:
        raise InvalidRequest(
            "this engine has no elastic logits processor; use elastic_mode two-pass or auto",
            param="elastic_mode",
        )
    if mode == "auto":
        return "one-pass" if has_processor else "two-pass"
    return mode


@dataclass(frozen=True, slots=True, kw_only=True)
class ElasticPlan:
    """Budgets as they will be enforced for one request."""

    thinking: int  # t, clamped so that the answer still fits the context
    solution: int | None  # s; None: the answer may run to the context's end
    sampling: SamplingConfig  # one-pass settings: max_tokens = t + 1 + s, extra_args set
    thinking_open: bool
    think_end_ids: tuple[int, ...]  # the closing delimiter (one token on most models)
    eos_id: int


def plan(request: StrategyRequest, engine: Engine, budget: Budget | None = None) -> ElasticPlan:
    """The elastic plan of ``request`` (``budget`` defaults to the request's).

    Other strategies compose with elastic budgets through this (one plan per request,
    applied to each of its samples). Raises ``InvalidBudget`` before any engine call
    when the budgets cannot be honoured.
    """
    budget = budget or request.budget
    tokens = engine.tokens
    if not tokens.think_end_ids:
        raise InvalidRequest(
            f"model {engine.model_name!r} is served without think delimiters (reasoning "
            "off); thinking/solution budgets need them to tell thinking from the answer",
            param="strategy",
        )
    if not tokens.eos_token_ids:
        raise InvalidRequest(
            f"model {engine.model_name!r} has no EOS token; a solution budget is enforced "
            "by forcing one",
            param="strategy",
        )
    if request.sampling.min_tokens > 0:
        # vLLM holds EOS back below min_tokens, while a solution budget ends the answer
        # by forcing EOS: the two would fight over the same logits.
        raise InvalidRequest(
            "min_tokens cannot be combined with thinking or solution budgets (a budget "
            "may end the completion first)",
            param="min_tokens",
        )
    end_ids = tokens.think_end_ids
    if len(end_ids) > elastic_args.MAX_THINK_END_TOKENS:
        raise InvalidRequest(
            f"model {engine.model_name!r} closes thinking with {len(end_ids)} tokens; "
            f"elastic budgets support at most {elastic_args.MAX_THINK_END_TOKENS}",
            param="strategy",
        )
    room = engine.max_model_len - len(request.prompt_token_ids)
    s = budget.solution
    if s is not None and s + 1 > room:
        raise InvalidBudget(
            f"solution budget {s} does not fit the context: the prompt leaves {room} tokens",
            param="budget.solution",
        )
    # Thinking gets what the answer and the closing delimiter leave; an unset t means
    # "until the context ends".
    ceiling = room - len(end_ids) - (s if s is not None else 0)
    t = min(budget.thinking, ceiling) if budget.thinking is not None else ceiling
    max_tokens = t + len(end_ids) + s if s is not None else None
    user_cap = request.sampling.max_tokens
    if user_cap is not None:
        max_tokens = min(max_tokens, user_cap) if max_tokens is not None else user_cap
    extra: dict[str, int | float | str] = dict(request.sampling.extra_args)
    extra[elastic_args.THINKING_BUDGET] = t
    if s is not None:
        extra[elastic_args.SOLUTION_BUDGET] = s
    if len(end_ids) == 1:
        extra[elastic_args.THINK_END_ID] = end_ids[0]
    else:  # a sequence travels as one string: vllm_xargs carries scalars only
        extra[elastic_args.THINK_END_IDS] = ",".join(map(str, end_ids))
    extra[elastic_args.EOS_ID] = tokens.eos_token_ids[0]
    extra[elastic_args.THINKING_OPEN] = int(request.thinking_open)
    if budget.thinking_min:
        extra[elastic_args.THINKING_MIN] = min(budget.thinking_min, t)
    return ElasticPlan(
        thinking=t,
        solution=s,
        sampling=replace(request.sampling, n=request.n, max_tokens=max_tokens, extra_args=extra),
        thinking_open=request.thinking_open,
        think_end_ids=end_ids,
        eos_id=tokens.eos_token_ids[0],
    )


def outcome(traj: Trajectory, p: ElasticPlan) -> Ending:
    """Honest finish_reason and per-choice details of a finished trajectory.

    ``length`` when the answer was cut (the solution budget or the context ran out);
    ``stop`` when the model ended its answer itself, even if thinking was cut.
    """
    thinking_cut = p.thinking_open and (
        not traj.think_closed or traj.reasoning_tokens >= p.thinking
    )
    solution_cut = (
        p.solution is not None
        and traj.content_tokens >= p.solution
        and (traj.think_closed or not p.thinking_open)
    )
    reason: FinishReason = traj.finish_reason or "abort"
    if reason == "stop" and solution_cut:
        reason = "length"
    info: dict[str, JSON] = {
        "thinking_tokens": traj.reasoning_tokens,
        "answer_tokens": traj.content_tokens,
        "cut": thinking_cut,
        "solution_cut": solution_cut,
    }
    return Ending(reason, info, budget_cuts(thinking=thinking_cut, solution=solution_cut))


async def two_pass(
    engine: Engine, request: StrategyRequest, p: ElasticPlan
) -> AsyncGenerator[SampleDelta, None]:
    """The fallback: per trajectory, think (``max_tokens = t``, stop at ``</think>``),
    then answer (``max_tokens = s``), with the same deltas a one-pass run would give.

    Each trajectory's answer call starts as soon as its thinking ends, so answers of
    early finishers overlap the others' thinking. Closing this generator cancels
    every engine call in flight.
    """
    run = _TwoPass(
        engine=engine,
        request=request,
        p=p,
        base=replace(request.sampling, extra_args={}, stop_token_ids=()),
        queue=asyncio.Queue(),
    )
    task = asyncio.create_task(run.passes())
    try:
        while (item := await run.queue.get()) is not None:
            yield item
        await task  # re-raises an engine error of either phase
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class _TwoPass:
    """One two-pass run: its engine calls put on ``queue`` the deltas a one-pass run
    would give, then None."""

    engine: Engine
    request: StrategyRequest
    p: ElasticPlan
    base: SamplingConfig  # the request's sampling, less the processors' arguments
    queue: asyncio.Queue[SampleDelta | None]

    async def passes(self) -> None:
        """Both passes: every thought, and each one's answer as soon as it closed."""
        try:
            async with asyncio.TaskGroup() as group:
                if not self.p.thinking_open or self.p.thinking == 0:
                    await self._no_thinking(group)
                else:
                    await self._first_pass(group)
        except BaseExceptionGroup as failed:
            # The engine's own error (a 503, a 400 naming a param), not a group: the error
            # handler maps GatewayErrors only, so a group would reach the client as a 500.
            raise first_error(failed) from failed
        finally:
            await self.queue.put(None)

    async def _no_thinking(self, group: asyncio.TaskGroup) -> None:
        """No thinking to draw (none, or a budget of 0): every trajectory answers now,
        after a closed empty thought where the model thinks."""
        p = self.p
        for i in range(self.request.n):
            thought = list(p.think_end_ids) if p.thinking_open else []
            if thought:
                await self.queue.put(SampleDelta(index=i, token_ids=tuple(thought)))
            group.create_task(self._second_pass(i, thought))

    async def _first_pass(self, group: asyncio.TaskGroup) -> None:
        """One thinking call of ``n`` trajectories; each thought, once closed, starts its
        answer (the second pass)."""
        p = self.p
        # A one-token </think> stops the call itself; a sequence cannot be a stop
        # token, so the stream is cut here at its first complete occurrence.
        closing = SequenceMatcher(p.think_end_ids)
        stops = p.think_end_ids if len(closing) == 1 else ()
        first = GenerateRequest(
            request_id=f"{self.request.request_id}-think",
            prompt_token_ids=self.request.prompt_token_ids,
            thinking_only=True,
            sampling=replace(
                self.base,
                n=self.request.n,
                max_tokens=p.thinking,
                stop_token_ids=stops,
                structured=None,  # the answer's grammar is the second pass's
            ),
        )
        thoughts: dict[int, list[int]] = {}
        matched: dict[int, int] = {}  # partial closing each thought ends with
        closed: set[int] = set()
        async with aclosing(self.engine.stream(first)) as thinking_stream:
            async for d in thinking_stream:
                if d.index in closed:
                    continue  # tokens past the closing belong to no one
                ids = list(d.token_ids)
                end, state = closing.find(ids, 0, matched.get(d.index, 0))
                if d.finish_reason is None and end < 0:
                    matched[d.index] = state
                    thoughts.setdefault(d.index, []).extend(ids)
                    await self.queue.put(d)
                    continue
                if d.finish_reason == "abort" and end < 0:
                    await self.queue.put(d)
                    continue
                ids, conf = self._closed(closing, d, end, matched.get(d.index, 0))
                closed.add(d.index)
                thoughts.setdefault(d.index, []).extend(ids)
                await self.queue.put(
                    SampleDelta(index=d.index, token_ids=tuple(ids), confidences=conf)
                )
                group.create_task(self._second_pass(d.index, thoughts[d.index]))
                if len(closed) == self.request.n:
                    break  # every thought closed: closing the stream aborts the rest

    def _closed(
        self, closing: SequenceMatcher, d: SampleDelta, end: int, matched: int
    ) -> tuple[list[int], tuple[float, ...] | None]:
        """The last delta of a thought, closed: cut at the closing it holds (``end``), or
        (it finished without one) the rest of the closing added; and its confidences."""
        ids = list(d.token_ids)
        # Confidences survive a cut (a prefix of the engine's tokens), not an injection:
        # the injected tokens were never sampled.
        conf = d.confidences
        if end >= 0:
            return ids[:end], None if conf is None else conf[:end]
        # Close thinking by injecting only the rest of </think> (a model that stopped
        # with EOS while thinking loses that EOS: the answer must follow).
        while ids and ids[-1] in self.engine.tokens.eos_token_ids:
            ids.pop()
        _, state = closing.find(ids, 0, matched)
        ids.extend(self.p.think_end_ids[state:])
        return ids, None

    async def _second_pass(self, index: int, thought: list[int]) -> None:
        """Trajectory ``index``'s answer after its closed ``thought``."""
        p = self.p
        if p.solution == 0:
            await self.queue.put(
                SampleDelta(index=index, token_ids=(p.eos_id,), finish_reason="stop")
            )
            return
        seed = None if self.base.seed is None else self.base.seed + index
        second = GenerateRequest(
            request_id=f"{self.request.request_id}-answer-{index}",
            prompt_token_ids=self.request.prompt_token_ids + tuple(thought),
            sampling=replace(self.base, n=1, seed=seed, max_tokens=p.solution),
        )
        async with aclosing(self.engine.stream(second)) as deltas:
            async for d in deltas:
                await self.queue.put(replace(d, index=index))
