"""The engine as one request sees it (:class:`RequestEngine`): its calls carry the
request's affinity key, and samples drawn again after their server failed are billed.

Affinity: every call of one client request (its samples, its follow-ups) shares a
prompt, so a router in front of the fleet should keep them on one replica, while
different requests spread. Each call gets ``GenerateRequest.affinity``, the request's
own id; the remote engine sends it as the router's session key.

Redraws: a remote engine that loses a server while it draws samples nobody has seen yet draws
them again elsewhere (``SampleDelta.redrawn``); the tokens the lost server generated
were spent all the same. Each request's strategy gets its engine through
:class:`RequestEngine`, which counts those deltas, and :func:`billed` adds them to the
request's ``Result``: ``usage.completion_tokens`` counts every generated token, lost
ones included, and the ``thinkgate`` object says how many samples were drawn again
(``redrawn_samples``, ``redrawn_lost_tokens``). One place for every strategy, so none
has to thread the count through its own bookkeeping.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, replace

from core.base import Result, StrategyEvent, Usage
from core.engine import (
    Engine,
    EngineLoad,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
)


@dataclass(slots=True)
class Tally:
    """One request's redraws (mutated by its own task only)."""

    samples: int = 0
    lost_tokens: int = 0


class RequestEngine:
    """``engine`` as one request sees it: calls pass through with the request's affinity
    key, redraws are counted."""

    def __init__(self, engine: Engine, tally: Tally, *, affinity: str) -> None:
        self._engine = engine
        self.tally = tally
        self.affinity = affinity
        self.model_name: str = engine.model_name
        self.tokens: ModelTokens = engine.tokens

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def processors(self) -> frozenset[str]:
        return self._engine.processors

    def _keyed(self, request: GenerateRequest) -> GenerateRequest:
        return request if request.affinity else replace(request, affinity=self.affinity)

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        return await self._engine.generate(self._keyed(request))

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        return await self._engine.generate_batch([self._keyed(r) for r in requests])

    def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        keyed = self._keyed(request)
        if request.visible:
            # Never redrawn (the engine ends it in an error instead): the engine's own
            # generator, no extra hop per token on the live streaming path.
            return self._engine.stream(keyed)
        return self._counted(keyed)

    async def _counted(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        deltas = self._engine.stream(request)
        try:
            async for delta in deltas:
                if delta.redrawn:
                    self.tally.samples += 1
                    self.tally.lost_tokens += delta.lost_tokens
                yield delta
        finally:
            # The consumer stopped early (or failed): close the engine's stream now, so
            # that it aborts its upstream calls at once.
            await deltas.aclose()

    def load(self) -> EngineLoad | None:
        return self._engine.load()

    async def health(self) -> None:
        await self._engine.health()

    async def aclose(self) -> None:
        """The shared engine outlives a request: nothing to close here."""


def billed(result: Result, tally: Tally) -> Result:
    """``result`` with the lost tokens in its usage and the redraws in its info."""
    if not tally.samples:
        return result
    u = result.usage
    usage = Usage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens + tally.lost_tokens,
        reasoning_tokens=u.reasoning_tokens,
    )
    info = {
        **result.info,
        "redrawn_samples": tally.samples,
        "redrawn_lost_tokens": tally.lost_tokens,
    }
    return replace(result, usage=usage, info=info)


async def with_tally(
    run: AsyncGenerator[StrategyEvent, None], tally: Tally
) -> AsyncGenerator[StrategyEvent, None]:
    """``run``'s events, its ``Result`` billed for the request's redraws."""
    try:
        async for event in run:
            yield billed(event, tally) if isinstance(event, Result) else event
    finally:
        await run.aclose()
