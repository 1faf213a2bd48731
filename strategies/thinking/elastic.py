"""Elastic Reasoning: a thinking budget ``t`` and a solution budget ``s`` per trajectory.

One engine pass when the engine has our logits processor (``kernels.elastic.vllm_v1``):
the processor forces ``</think>`` once ``t`` thinking tokens are spent, then
allows ``s`` answer tokens, then forces EOS, so an answer always comes. Without
the processor (a remote replica without thinkgate installed) the same contract
is kept with two engine calls per trajectory: think with ``max_tokens = t``
stopping at ``</think>``, then answer from the thinking with ``max_tokens = s``
(docs/specs.md §1). Only the ``</think>`` delimiter is ever injected (a token
sequence on models where it is several tokens: forced whole, one token per step).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace
from typing import ClassVar

from core import options
from core.base import StrategyContext, StrategyEvent, StrategyRequest
from core.engine import Engine, GenerateRequest
from core.errors import InvalidBudget
from strategies.elastic_plan import (
    outcome,
    plan,
    requested_mode,
    two_pass,
)
from strategies.trajectories import Ending, Trajectory, TrajectorySet


class Elastic:
    """``elastic``: thinking and solution budgets, enforced in one decoding pass."""

    name: ClassVar[str] = "elastic"
    budget_fields: ClassVar[frozenset[str]] = frozenset({"thinking", "solution", "thinking_min"})
    body_options: ClassVar[frozenset[str]] = frozenset({"elastic_mode", "return_token_ids"})
    streams_live: ClassVar[bool] = True
    # The engine's grammar on the answer; with a solution budget in two passes.
    honours_response_format: ClassVar[bool] = True
    # Calls come after thinking: a forced </think> never lands inside one; a call the
    # solution budget cuts stays text, and the choice ends as length.
    honours_tools: ClassVar[bool] = True

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        b = request.budget
        if b.thinking is None and b.solution is None and b.thinking_min is None:
            raise InvalidBudget(
                "elastic needs a thinking and/or solution budget (X-Budget-Thinking, "
                "X-Budget-Solution or budget.thinking/solution) or a thinking minimum",
                param="budget.thinking",
            )
        plan(request, engine)
        requested_mode(request, engine)

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[StrategyEvent, None]:
        request, engine = ctx.request, ctx.engine
        p = plan(request, engine)
        trajectories = TrajectorySet(engine.tokens, thinking_open=request.thinking_open)
        mode = requested_mode(request, engine)
        if mode == "one-pass":
            deltas = engine.stream(
                GenerateRequest(
                    request_id=request.request_id,
                    prompt_token_ids=request.prompt_token_ids,
                    sampling=p.sampling,
                    visible=request.stream,
                )
            )
        else:
            deltas = two_pass(engine, request, p)
        # aclosing: a client that goes away closes this generator; the engine stream
        # must close now (aborting its requests), not whenever it is collected.
        async with aclosing(deltas):
            async for delta in deltas:
                event = trajectories.push(delta)
                if event is not None:
                    yield event
        with_ids = options.flag(request.options, "return_token_ids", False)  # as ``plain``

        def finished(traj: Trajectory) -> Ending:
            end = outcome(traj, p)
            if not with_ids:
                return end
            return replace(end, info={**end.info, "token_ids": list(traj.token_ids)})

        final = trajectories.final(
            len(request.prompt_token_ids),
            finished,
            {"mode": mode, "thinking_budget": p.thinking, "solution_budget": p.solution},
        )
        yield replace(final, info={**final.info, "cut": any(c.info["cut"] for c in final.choices)})
