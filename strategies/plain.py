"""``plain``: the model as it is. One trajectory per choice, all in ONE engine request.

``n`` choices are ``n`` samples of one request (``SamplingConfig.n = n``), so vLLM
shares the prompt's KV cache. Honours every sampling field of the request and no
budget field. Streams live: reasoning deltas, then content deltas, per choice.

Option (body field) ``return_token_ids: true``: each choice's ``thinkgate`` object
holds the generated ``token_ids`` (for exact accounting checks and RL pipelines).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import ClassVar

from strategies.base import (
    Choice,
    ChoiceDelta,
    Final,
    StrategyContext,
    StrategyEvent,
    StrategyRequest,
    Usage,
)
from strategies.engine import Engine, FinishReason, GenerateRequest, ModelTokens, Sample
from strategies.errors import InvalidRequest
from strategies.reasoning import StreamSplitter, split_ids


class Plain:
    name: ClassVar[str] = "plain"
    budget_fields: ClassVar[frozenset[str]] = frozenset()
    streams_live: ClassVar[bool] = True

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        if request.n < 1:
            raise InvalidRequest(f"n must be at least 1, got {request.n}", param="n")

    async def run(self, ctx: StrategyContext) -> AsyncIterator[StrategyEvent]:
        req = ctx.request
        gen = GenerateRequest(
            request_id=req.request_id,
            prompt_token_ids=req.prompt_token_ids,
            sampling=replace(req.sampling, n=req.n),
        )
        tokens = ctx.engine.tokens
        with_ids = req.options.get("return_token_ids") is True
        if not req.stream:
            samples = await ctx.engine.generate(gen)
            yield final_from_samples(samples, req, tokens, with_ids=with_ids)
            return

        splitters = {
            i: StreamSplitter(tokens, thinking_open=req.thinking_open) for i in range(req.n)
        }
        reasoning: dict[int, list[str]] = {i: [] for i in range(req.n)}
        content: dict[int, list[str]] = {i: [] for i in range(req.n)}
        finish: dict[int, FinishReason] = {}
        ids: dict[int, list[int]] = {i: [] for i in range(req.n)}
        stream = ctx.engine.stream(gen)
        try:
            async for delta in stream:
                ids[delta.index].extend(delta.token_ids)
                splitter = splitters[delta.index]
                text = splitter.push(delta.token_ids)
                r, c = text.reasoning, text.content
                if delta.finish_reason is not None:
                    rest = splitter.flush()
                    r, c = r + rest.reasoning, c + rest.content
                    finish[delta.index] = delta.finish_reason
                reasoning[delta.index].append(r)
                content[delta.index].append(c)
                if r or c or delta.finish_reason is not None:
                    yield ChoiceDelta(
                        index=delta.index, reasoning=r, content=c, finish_reason=delta.finish_reason
                    )
        finally:
            # Closed early (client gone): close the engine stream now, which aborts it.
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        choices = tuple(
            Choice(
                index=i,
                reasoning="".join(reasoning[i]),
                content="".join(content[i]),
                finish_reason=finish.get(i, "abort"),
                info={"token_ids": ids[i]} if with_ids else {},
            )
            for i in range(req.n)
        )
        usage = Usage(
            prompt_tokens=len(req.prompt_token_ids),
            completion_tokens=sum(s.completion_tokens for s in splitters.values()),
            reasoning_tokens=sum(s.reasoning_tokens for s in splitters.values()),
        )
        yield Final(choices=choices, usage=usage, samples=req.n)


def final_from_samples(
    samples: list[Sample], request: StrategyRequest, tokens: ModelTokens, *, with_ids: bool = False
) -> Final:
    """Each sample becomes the choice of its index; usage is exact, from token ids."""
    choices = []
    reasoning_tokens = 0
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
            )
        )
    usage = Usage(
        prompt_tokens=len(request.prompt_token_ids),
        completion_tokens=sum(len(s.token_ids) for s in samples),
        reasoning_tokens=reasoning_tokens,
    )
    return Final(choices=tuple(choices), usage=usage, samples=len(samples))
