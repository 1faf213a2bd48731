"""An ``Engine`` driven by a function: strategy and HTTP tests without vLLM.

Like httpx's ``MockTransport``: the engine seam stays real (strategies, admission,
streaming and error mapping all run as in production) and only token generation is
replaced by ``handler(request) -> samples``. The handler may be sync or async, may
raise any ``GatewayError`` (the engine's failure, as a real engine would raise it),
and sees every ``GenerateRequest`` the strategy made (``ScriptedEngine.calls``).

``stream`` replays the handler's samples as deltas, one token per delta, the samples
interleaved round-robin as a batch would interleave them; each index ends with its
``finish_reason`` (the engine contract); a sample's ``confidences``, if it has any,
and ``logprobs`` go one per token with its deltas; ``step_s`` paces the steps (tokens then reach the
client one network write at a time, as from a real engine). Use it with ``create_app(settings,
engine=ScriptedEngine(...))`` and an ``httpx.AsyncClient`` over ``httpx.ASGITransport``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

from core.engine import (
    EngineLoad,
    FinishReason,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    generate_each,
)
from core.errors import BackendUnavailable

Handler = Callable[[GenerateRequest], Sequence[Sample] | Awaitable[Sequence[Sample]]]


class ScriptedEngine:
    """Implements ``core.engine.Engine``; ``dead = True`` makes it answer 503s."""

    def __init__(
        self,
        handler: Handler,
        *,
        tokens: ModelTokens,
        model_name: str = "scripted",
        max_model_len: int = 512,
        processors: frozenset[str] = frozenset(),
        step_s: float = 0.0,
        lose_tokens: int = 0,
    ) -> None:
        self._handler = handler
        # > 0: on streams that are not ``visible``, each sample's first ``lose_tokens``
        # tokens are drawn, then lost with their server (``SampleDelta.redrawn``, as the
        # remote engine reports it) and the sample is drawn again in full.
        self.lose_tokens = lose_tokens
        self._step_s = step_s  # pause between stream steps, as a real engine's decode step
        self.tokens = tokens
        self.model_name = model_name
        self._max_model_len = max_model_len
        self._processors = processors
        self.calls: list[GenerateRequest] = []
        # Requests per ``generate_batch`` call, in order (a step search's rounds).
        self.batches: list[int] = []
        self.dead = False
        # What load() reports: a test scripts the engine's load (None: unknown).
        self.loads: list[EngineLoad | None] = []

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    @property
    def processors(self) -> frozenset[str]:
        return self._processors

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        await self.health()
        self.calls.append(request)
        got = self._handler(request)
        samples = await got if inspect.isawaitable(got) else got
        for s in samples:
            # A handler's slip, caught here rather than as a misaligned score later.
            for name, per_token in (("confidences", s.confidences), ("logprobs", s.logprobs)):
                if per_token is not None and len(per_token) != len(s.token_ids):
                    raise ValueError(
                        f"sample {s.index}: {len(per_token)} {name} for {len(s.token_ids)} tokens"
                    )
        return sorted(samples, key=lambda s: s.index)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        self.batches.append(len(requests))
        return await generate_each(self.generate, requests)

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        samples = await self.generate(request)
        if self.lose_tokens and not request.visible:
            for s in samples:
                lost = s.token_ids[: self.lose_tokens]
                yield SampleDelta(index=s.index, token_ids=lost)
                yield SampleDelta(index=s.index, token_ids=(), redrawn=True, lost_tokens=len(lost))
        longest = max((len(s.token_ids) for s in samples), default=0)
        for step in range(max(longest, 1)):
            if step and self._step_s:
                await asyncio.sleep(self._step_s)
            for s in samples:
                steps = max(len(s.token_ids), 1)  # an empty sample still ends once
                if step >= steps:
                    continue
                last = step == steps - 1
                conf, lps = s.confidences, s.logprobs
                yield SampleDelta(
                    index=s.index,
                    token_ids=s.token_ids[step : step + 1],
                    finish_reason=s.finish_reason if last else None,
                    cumulative_logprob=s.cumulative_logprob if last else None,
                    stop_reason=s.stop_reason if last else None,
                    confidences=None if conf is None else conf[step : step + 1],
                    logprobs=None if lps is None else lps[step : step + 1],
                )

    def load(self) -> EngineLoad | None:
        """The next scripted load (the last one repeats), or None."""
        if not self.loads:
            return None
        return self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]

    async def health(self) -> None:
        if self.dead:
            raise BackendUnavailable("the scripted engine is marked dead")

    async def aclose(self) -> None:
        return None


def samples_of(
    tokens: ModelTokens, *texts: str, finish_reason: FinishReason = "stop"
) -> list[Sample]:
    """Samples whose tokens encode ``texts`` (special tokens such as ``</think>`` in the
    text become their ids), ending with the model's EOS when ``finish_reason`` is
    ``stop``: a handler's usual answer."""
    eos = tokens.eos_token_ids[:1] if finish_reason == "stop" else ()
    return [
        Sample(
            index=i,
            token_ids=(*tokens.encode(text), *eos),
            finish_reason=finish_reason,
        )
        for i, text in enumerate(texts)
    ]
