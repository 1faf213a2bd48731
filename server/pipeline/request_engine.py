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

Ceiling and clock: a request's total-token ceiling and deadline (``core.allowance``)
hold here, for every call of every strategy (``server.pipeline.call_fit`` fits each call: fewer
tokens, a thinking budget that leaves the answer room, the instant thinking ends inside
the engine). A call that no longer fits raises ``BudgetSpent`` before it is sent; a call
still running when the deadline comes is ended here (its engine request aborted, every
unfinished sample closed with ``finish_reason="length"``), so the request's last engine
token comes by its deadline even where the engine cannot end thinking itself. A call
whose worst case ends far before the deadline is sent whole under a timeout instead (a
deadline that does not bind costs no stream).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Final

from core.allowance import Allowance, BudgetSpent, DecodeSpeed
from core.base import Choice, Result, StrategyEvent, Usage
from core.engine import (
    Engine,
    EngineLoad,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    TokenLogprob,
    all_of,
)
from server.pipeline.call_fit import Fitted, fit_call
from strategies.pool import finished_confidences

# A non-streamed call is sent whole (not as a stream the gateway can cut token by token)
# when its worst case at the measured speed, x FAR_MARGIN, plus FAR_QUEUE_S for the
# queue, ends before its cut: the speed is an average that lags load, hence the width.
FAR_MARGIN: Final = 3.0
FAR_QUEUE_S: Final = 0.5


@dataclass(slots=True)
class Tally:
    """One request's redraws (mutated by its own task only)."""

    samples: int = 0
    lost_tokens: int = 0


class RequestEngine:
    """``engine`` as one request sees it: calls pass through with the request's affinity
    key, redraws are counted."""

    def __init__(
        self,
        engine: Engine,
        tally: Tally,
        *,
        affinity: str,
        tenant: str | None = None,
        objective: str | None = None,
        allowance: Allowance | None = None,
        speed: DecodeSpeed | None = None,
        answer_reserve: int = 16,
    ) -> None:
        self._engine = engine
        self.tally = tally
        self.affinity = affinity
        self.tenant = tenant
        self.objective = objective
        self.model_name: str = engine.model_name
        self.tokens: ModelTokens = engine.tokens
        self.allowance = allowance or Allowance()
        # The server's decode speed, measured on every call that is not streamed live.
        self.speed = speed or self.allowance.speed
        self.answer_reserve = answer_reserve

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def processors(self) -> frozenset[str]:
        return self._engine.processors

    def _keyed(self, request: GenerateRequest) -> GenerateRequest:
        if request.affinity and request.tenant and request.objective:
            return request
        return replace(
            request,
            affinity=request.affinity or self.affinity,
            tenant=request.tenant or self.tenant,
            objective=request.objective or self.objective,
        )

    def _fit(self, request: GenerateRequest, rows: int | None = None) -> Fitted:
        """The call as it is sent under the request's ceiling and clock, its tokens
        reserved (raises ``BudgetSpent`` when it does not fit); ``rows``: its own and
        its batch's unfitted rows."""
        fitted = fit_call(
            self._keyed(request),
            self.allowance,
            tokens=self.tokens,
            max_model_len=self.max_model_len,
            processors=self.processors,
            answer_reserve=self.answer_reserve,
            rows=rows,
        )
        self.allowance.reserve(fitted.reserved)
        if fitted.clamped:
            self.allowance.clamped_calls += 1
        return fitted

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        if not self.allowance.limited:
            return await self._engine.generate(self._keyed(request))
        return (await self._generate_fitted([self._fit(request)]))[0]

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        if not self.allowance.limited:
            return await self._engine.generate_batch([self._keyed(r) for r in requests])
        fitted: list[Fitted] = []
        rows = sum(max(1, r.sampling.n) for r in requests)
        try:
            for r in requests:
                fitted.append(self._fit(r, rows))
                rows -= max(1, r.sampling.n)
        except BudgetSpent:
            for f in fitted:  # none was sent
                self.allowance.settle(f.reserved, 0)
            raise
        return await self._generate_fitted(fitted)

    def _seconds_to(self, fitted: Sequence[Fitted]) -> float | None:
        """Seconds until the first cut of ``fitted`` (None: none is cut), on the clock
        the cuts were set on."""
        cuts = [f.cut_at for f in fitted if f.cut_at is not None]
        return None if not cuts else max(0.0, min(cuts) - self.allowance.clock())

    def _far_from_cut(self, fitted: Sequence[Fitted]) -> bool:
        """Whether the calls' worst case (every row to ``max_tokens`` at the measured
        speed), with a wide margin, ends well before their first cut: a deadline that
        does not bind need not pay for a stream (vLLM's per-step outputs and a timer per
        delta); if it binds after all, the whole-call timeout still ends the calls."""
        left = self._seconds_to(fitted)
        if left is None:
            return True
        longest = max(f.request.sampling.max_tokens or self.max_model_len for f in fitted)
        return longest * self.speed.seconds_per_token * FAR_MARGIN + FAR_QUEUE_S < left

    async def _generate_fitted(self, fitted: Sequence[Fitted]) -> list[list[Sample]]:
        if self._far_from_cut(fitted) or any(
            f.request.sampling.prompt_logprobs is not None for f in fitted
        ):
            # No deadline, or one far away (or prompt logprobs, which only whole calls
            # return): the engine's own calls, batched as it batches them; the deadline,
            # if any, still ends them, losing their tokens (BudgetSpent).
            try:
                async with asyncio.timeout(self._seconds_to(fitted)):
                    results = await self._engine.generate_batch([f.request for f in fitted])
            except TimeoutError:
                for f in fitted:
                    self.allowance.settle(f.reserved, f.reserved)  # generated, unknown how many
                self.allowance.deadline_cuts += 1
                raise BudgetSpent("deadline", "the deadline came during the call") from None
            for f, samples in zip(fitted, results, strict=True):
                self.allowance.settle(f.reserved, sum(len(s.token_ids) for s in samples))
            return results
        # A deadline: each call as a stream, so that a call the deadline ends keeps the
        # tokens it generated (its unfinished samples end as cut by length).
        return await all_of(_collect(self._metered(f)) for f in fitted)

    def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        if self.allowance.limited:
            return self._metered(self._fit(request))
        keyed = self._keyed(request)
        if request.visible:
            # Never redrawn (the engine ends it in an error instead): the engine's own
            # generator, no extra hop per token on the live streaming path.
            return self._engine.stream(keyed)
        return self._counted(keyed)

    async def _counted(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        deltas = self._engine.stream(request)
        clock = _RowClock(self.speed)
        try:
            async for delta in deltas:
                if delta.redrawn:
                    self.tally.samples += 1
                    self.tally.lost_tokens += delta.lost_tokens
                clock.saw(delta)
                yield delta
        finally:
            # The consumer stopped early (or failed): close the engine's stream now, so
            # that it aborts its upstream calls at once.
            await deltas.aclose()

    async def _metered(self, fitted: Fitted) -> AsyncGenerator[SampleDelta, None]:
        """The engine's stream of a fitted call: its tokens settled against the
        reservation when it ends, cut in the gateway when the deadline comes."""
        request, allowance = fitted.request, self.allowance
        deltas = self._engine.stream(request)
        clock = _RowClock(self.speed)
        used = 0
        ended: set[int] = set()
        cut = _Cut(None if fitted.cut_at is None else fitted.cut_at - allowance.clock())
        try:
            while True:
                try:
                    delta = await cut.wait(deltas)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    allowance.deadline_cuts += 1
                    await deltas.aclose()  # aborts the engine request
                    for i in range(request.sampling.n):
                        if i not in ended:
                            yield SampleDelta(index=i, token_ids=(), finish_reason="length")
                    break
                if delta.redrawn:
                    self.tally.samples += 1
                    self.tally.lost_tokens += delta.lost_tokens
                    used += delta.lost_tokens
                used += len(delta.token_ids)
                if delta.finish_reason is not None:
                    ended.add(delta.index)
                clock.saw(delta)
                yield delta
        finally:
            cut.close()
            await deltas.aclose()
            allowance.settle(fitted.reserved, used)

    def load(self) -> EngineLoad | None:
        return self._engine.load()

    async def health(self) -> None:
        await self._engine.health()

    async def aclose(self) -> None:
        """The shared engine outlives a request: nothing to close here."""


class _Cut:
    """One call's cut: a single timer, at which the task waiting for the engine's next
    delta is cancelled and gets ``TimeoutError`` (a cut that comes while no one waits is
    raised at the next wait). ``asyncio.timeout`` around each wait did the same at a
    timer per delta, 10 us each: a deadline that never binds paid that on every token."""

    __slots__ = ("_handle", "_task", "_waiting", "_due", "_fired")

    def __init__(self, seconds: float | None) -> None:
        self._task: asyncio.Task[object] | None = None
        self._waiting = False
        self._due = False
        self._fired = False
        loop = asyncio.get_running_loop()
        self._handle = None if seconds is None else loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self._due = True
        if self._waiting and self._task is not None:
            self._fired = True
            self._task.cancel()

    async def wait(self, deltas: AsyncGenerator[SampleDelta, None]) -> SampleDelta:
        if self._due:
            raise TimeoutError
        self._task = asyncio.current_task()
        self._waiting = True
        try:
            return await anext(deltas)
        except asyncio.CancelledError:
            if not self._fired or self._task is None or self._task.uncancel() > 0:
                raise  # a cancellation of the task's own, not the cut
            raise TimeoutError from None
        finally:
            self._waiting = False

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


class _RowClock:
    """Measures one call's decode speed per row: each sample's tokens after its first,
    over the time they took (``DecodeSpeed``)."""

    __slots__ = ("_first", "_tokens", "_speed")

    def __init__(self, speed: DecodeSpeed) -> None:
        self._speed = speed
        self._first: dict[int, float] = {}
        self._tokens: dict[int, int] = {}

    def saw(self, delta: SampleDelta) -> None:
        i = delta.index
        if delta.redrawn:
            self._first.pop(i, None)
            self._tokens.pop(i, None)
            return
        now = time.perf_counter()
        if i not in self._first:
            self._first[i] = now
            self._tokens[i] = len(delta.token_ids) - 1
        else:
            self._tokens[i] += len(delta.token_ids)
        if delta.finish_reason is not None:
            self._speed.observe(now - self._first[i], self._tokens[i])


async def _collect(deltas: AsyncGenerator[SampleDelta, None]) -> list[Sample]:
    """A call's deltas as its finished samples, ordered by index (what ``generate``
    gives), redraws forgotten as the engine contract says (``strategies.pool.draw``
    reads a pool the same way)."""
    ids: dict[int, list[int]] = {}
    confs: dict[int, list[float]] = {}
    bare: set[int] = set()  # tokens that came without confidences (an injected one)
    lps: dict[int, list[TokenLogprob]] = {}
    done: dict[int, Sample] = {}
    async with aclosing(deltas):
        async for d in deltas:
            i = d.index
            if d.redrawn:
                ids.pop(i, None)
                confs.pop(i, None)
                lps.pop(i, None)
                bare.discard(i)
                continue
            ids.setdefault(i, []).extend(d.token_ids)
            if d.confidences is not None and len(d.confidences) == len(d.token_ids):
                confs.setdefault(i, []).extend(d.confidences)
            elif d.token_ids:
                bare.add(i)
            if d.logprobs is not None:
                lps.setdefault(i, []).extend(d.logprobs)
            if d.finish_reason is not None and i not in done:
                done[i] = Sample(
                    index=i,
                    token_ids=tuple(ids.get(i, ())),
                    finish_reason=d.finish_reason,
                    cumulative_logprob=d.cumulative_logprob,
                    stop_reason=d.stop_reason,
                    confidences=finished_confidences(i, ids.get(i), bare, confs),
                    logprobs=tuple(lps[i]) if i in lps else None,
                )
    return [done[i] for i in sorted(done)]


def billed(result: Result, tally: Tally, allowance: Allowance | None = None) -> Result:
    """``result`` with the lost tokens in its usage, the redraws and the request's
    allowance (ceiling, deadline) in its info."""
    if allowance is not None and allowance.limited:
        used = result.usage.completion_tokens + tally.lost_tokens
        result = replace(result, info={**result.info, "allowance": allowance.report(used)})
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
    run: AsyncGenerator[StrategyEvent, None], tally: Tally, allowance: Allowance | None = None
) -> AsyncGenerator[StrategyEvent, None]:
    """``run``'s events, its ``Result`` billed for the request's redraws (and reporting
    its allowance)."""
    try:
        async for event in run:
            yield billed(event, tally, allowance) if isinstance(event, Result) else event
    except BudgetSpent as spent:
        # The strategy had no call left that fits (a deadline already past when it began,
        # or a strategy that does not stop by itself): an empty answer, on time, honest.
        if allowance is None:
            raise
        allowance.stop(spent.reason)
        yield billed(unanswered(spent), tally, allowance)
    finally:
        await run.aclose()


def unanswered(spent: BudgetSpent) -> Result:
    """The result of a request whose limits left no call: no text, cut by length."""
    choice = Choice(
        index=0,
        reasoning="",
        content="",
        finish_reason="length",
        info={"unanswered": str(spent)},
    )
    return Result(
        choices=(choice,),
        usage=Usage(prompt_tokens=0, completion_tokens=0, reasoning_tokens=0),
        samples=0,
    )
