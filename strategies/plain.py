"""``plain``: the model as it is. One trajectory per choice, all in ONE engine request.

``n`` choices are ``n`` samples of one request (``SamplingConfig.n = n``), so vLLM
shares the prompt's KV cache. Honours every sampling field of the request and no
budget field. Streams live: reasoning deltas, then content deltas, per choice.

Option (body field) ``return_token_ids: true``: each choice's ``thinkgate`` object
holds the generated ``token_ids`` (for exact accounting checks and RL pipelines).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace
from typing import ClassVar

from core import options
from core.base import (
    Choice,
    Result,
    StrategyContext,
    StrategyEvent,
    StrategyRequest,
    Usage,
)
from core.engine import Engine, GenerateRequest, ModelTokens, Sample
from core.errors import InvalidRequest
from strategies.logprobs import Texts
from strategies.reasoning import split_ids
from strategies.trajectories import TrajectorySet


class Plain:
    name: ClassVar[str] = "plain"
    budget_fields: ClassVar[frozenset[str]] = frozenset()
    body_options: ClassVar[frozenset[str]] = frozenset({"return_token_ids"})
    streams_live: ClassVar[bool] = True
    returns_logprobs: ClassVar[bool] = True
    returns_prompt_logprobs: ClassVar[bool] = True  # completions' echo with logprobs
    honours_response_format: ClassVar[bool] = True  # the engine's grammar, per choice
    honours_tools: ClassVar[bool] = True  # each choice's answer may be calls

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        if request.n < 1:
            raise InvalidRequest(f"n must be at least 1, got {request.n}", param="n")

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[StrategyEvent, None]:
        req = ctx.request
        gen = GenerateRequest(
            request_id=req.request_id,
            prompt_token_ids=req.prompt_token_ids,
            sampling=replace(req.sampling, n=req.n),
        )
        tokens = ctx.engine.tokens
        with_ids = options.flag(req.options, "return_token_ids", False)
        if not req.stream:
            samples = await ctx.engine.generate(gen)
            yield final_from_samples(samples, req, tokens, with_ids=with_ids)
            return

        trajectories = TrajectorySet(tokens, thinking_open=req.thinking_open)
        # aclosing: a client that goes away closes this generator; the engine stream
        # closes at once, which aborts it.
        async with aclosing(ctx.engine.stream(gen)) as stream:
            async for delta in stream:
                event = trajectories.push(delta)
                if event is not None:
                    yield event
        choices = tuple(
            traj.choice(info={"token_ids": traj.token_ids} if with_ids else {})
            for traj in (trajectories.get(i) for i in range(req.n))
        )
        usage = trajectories.usage(len(req.prompt_token_ids))
        yield Result(choices=choices, usage=usage, samples=req.n)


def final_from_samples(
    samples: list[Sample], request: StrategyRequest, tokens: ModelTokens, *, with_ids: bool = False
) -> Result:
    """Each sample becomes the choice of its index; usage is exact, from token ids."""
    choices = []
    reasoning_tokens = 0
    texts = Texts(tokens)
    for s in samples:
        split = split_ids(s.token_ids, tokens, thinking_open=request.thinking_open)
        reasoning_tokens += split.reasoning_tokens
        choices.append(
            Choice(
                index=s.index,
                reasoning=tokens.decode(split.reasoning_ids),
                content=tokens.decode(split.content_ids),
                finish_reason=s.finish_reason,
                info={"token_ids": list(s.token_ids)} if with_ids else {},
                stop_sequence=s.stop_reason if isinstance(s.stop_reason, str) else None,
                logprobs=None if s.logprobs is None else texts.entries(s.logprobs),
                prompt_logprobs=(
                    None
                    if s.prompt_logprobs is None
                    else texts.prompt(s.prompt_logprobs, request.prompt_token_ids)
                ),
            )
        )
    usage = Usage(
        prompt_tokens=len(request.prompt_token_ids),
        completion_tokens=sum(len(s.token_ids) for s in samples),
        reasoning_tokens=reasoning_tokens,
    )
    return Result(choices=tuple(choices), usage=usage, samples=len(samples))
