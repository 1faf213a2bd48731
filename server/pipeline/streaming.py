"""Strategy events -> SSE bytes, and the task that produces them.

Live strategies: a role chunk per choice, then its reasoning deltas, then its content
deltas. Multi-sample strategies: each ``Progress`` as a comment line, then ``Result``'s
choices replayed as normal chunks (reasoning, then content). In both, the chunks with
``finish_reason`` come once ``Result`` is known; the last one carries ``thinkgate``.
Then a usage chunk (``stream_options.include_usage``) and ``[DONE]``. With vLLM's
``continuous_usage_stats`` as well, every chunk carries the usage so far, as vLLM's
server sends it: live chunks count the tokens generated until then (strategies that
count them live: ``ChoiceDelta.completion_tokens``), replayed and final chunks the
result's usage. A failure after
the first byte is one ``data: {"error": ...}`` frame, then the stream closes.

``StreamRun`` runs the strategy in its own task and queues encoded frames; the response
body (``sse_body``) sends what is queued, and when nothing comes for
``sse_keepalive_s`` it sends ``: keep-alive`` so that proxies do not cut a stream whose
samples are still being drawn. How long each frame waited between the queue and the
end of its send goes to ``thinkgate_stream_frame_wait_seconds``. The headers go as soon
as the first event is there, or after ``FIRST_EVENT_WAIT_S``; errors found before that
keep their real status code. A strategy that draws samples before it answers then opens
the body with ``: thinkgate.progress {"status": "admitted"}``. A live strategy
(``plain``, ``elastic``) sends no comment before its first token, as vLLM's own server
sends none: vLLM's benchmark client strips every network read and, when a comment
arrives in a read of its own, glues the next event onto it and loses every event after
it (measured: 35 of 100 requests at once "failed", each one queued in the engine for
over a second).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Final, Protocol

import structlog
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from core.base import ChoiceDelta, LogprobEntry, Progress, Result, StrategyEvent
from core.errors import BackendError, BackendUnavailable, GatewayError
from server.apis.openai import render, sse
from server.apis.openai.render import Body, Envelope
from server.errors import loggable
from server.gateway import Gateway
from server.process.metrics import record_end

log = structlog.get_logger("thinkgate.http")

FIRST_EVENT_WAIT_S: Final = 1.0  # headers wait this long at most for the first event

# Detached clean-ups (strong references until they finish).
_CLEANUPS: set[asyncio.Task[None]] = set()


@dataclass(frozen=True, slots=True)
class Done:
    """The last frames of a stream and the result they came from."""

    frames: bytes
    final: Result


class Signal:
    """A marker ``StreamRun.next`` returns instead of frames."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


KEEPALIVE: Final = Signal("KEEPALIVE")  # nothing came in time: send a keep-alive
ABORTED: Final = Signal("ABORTED")  # the server stopped waiting (drain time is up)

Item = bytes | Done | Exception | Signal


class Encoder(Protocol):
    """A stream's wire format: OpenAI chunks (``StreamEncoder``), or another API's events
    (``server.apis.responses.render``, ``server.apis.messages.render``)."""

    def encode(self, event: StrategyEvent) -> list[bytes]:
        """The frames of one strategy event (``Result`` last: the closing frames)."""
        ...

    def error(self, err: GatewayError) -> bytes:
        """The one frame a failure after the first byte sends."""
        ...

    def end(self) -> bytes:
        """What follows the last event (``data: [DONE]`` for OpenAI chunks)."""
        ...


class StreamRun:
    """A strategy's events, encoded by a producer task into a queue of SSE frames.

    The producer owns the events (closing them aborts their engine requests); ``aclose``
    cancels it. ``aborting`` (the lifecycle's) ends every wait with ``ABORTED``.
    """

    def __init__(
        self,
        events: AsyncGenerator[StrategyEvent, None],
        encoder: Encoder,
        *,
        strategy: str,
        aborting: asyncio.Future[None],
    ) -> None:
        self._events = events
        self.encoder = encoder
        self._strategy = strategy
        self._items: collections.deque[Item] = collections.deque()
        self._put_at: collections.deque[float] = collections.deque()  # one per item
        self.waiting_since = 0.0  # when the item ``next`` returned last was queued
        self._waiter: asyncio.Future[None] | None = None
        self._aborting = aborting
        self._aborted = aborting.done()
        aborting.add_done_callback(self._on_abort)
        self._task = asyncio.get_running_loop().create_task(self._produce())

    async def _produce(self) -> None:
        try:
            async with aclosing(self._events):
                async for event in self._events:
                    frames = b"".join(self.encoder.encode(event))
                    if isinstance(event, Result):
                        self._put(Done(frames, event))
                        return
                    self._put(frames)
            self._put(BackendError(f"strategy {self._strategy!r} ended without a result"))
        except Exception as exc:
            self._put(exc)

    def _put(self, item: Item) -> None:
        self._items.append(item)
        self._put_at.append(time.perf_counter())
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _on_abort(self, _: asyncio.Future[None]) -> None:
        self._aborted = True
        self._wake()

    async def next(self, wait_s: float) -> Item:
        """The next item: frames (several queued ones joined), ``Done``, an error,
        ``KEEPALIVE`` after ``wait_s`` of nothing, or ``ABORTED``."""
        if not self._items and not self._aborted:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(wait_s, _resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        if self._aborted:
            return ABORTED
        if not self._items:
            return KEEPALIVE
        item = self._items.popleft()
        self.waiting_since = self._put_at.popleft()
        # Frames that queued up while the client was being written to go in one send.
        while isinstance(item, bytes) and self._items and isinstance(self._items[0], bytes):
            item += self._items.popleft()  # type: ignore[operator]
            self._put_at.popleft()
        return item

    async def aclose(self) -> None:
        """Stop the strategy (aborting its engine requests) and wait until it has."""
        self._aborting.remove_done_callback(self._on_abort)
        if not self._task.done():
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class EventStreamResponse(StreamingResponse):
    """An SSE response that cleans up however it ends, even when its body never started
    (the client left between admission and the first byte): ``on_end`` runs and the
    strategy is stopped, which aborts its engine requests. The stop runs in its own task,
    so a cancel scope that keeps cancelling this one cannot stop it."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        *,
        run: StreamRun,
        on_end: Callable[[], None],
        headers: Mapping[str, str],
    ) -> None:
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self._run = run
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_end()
            task = asyncio.get_running_loop().create_task(self._run.aclose())
            _CLEANUPS.add(task)
            task.add_done_callback(_CLEANUPS.discard)


class StreamEncoder:
    def __init__(
        self,
        env: Envelope,
        *,
        include_usage: bool,
        continuous_usage: bool = False,
        prompt_tokens: int = 0,
    ) -> None:
        self._env = env
        self._include_usage = include_usage
        self._continuous = continuous_usage
        self._prompt_tokens = prompt_tokens
        self._started: set[int] = set()
        self._generated: dict[int, int] = {}  # choice -> tokens so far (continuous usage)
        self._offsets: dict[int, int] = {}  # choice -> text offset (completions' logprobs)
        self._tools = env.tools if env.kind == "chat" else None

    def error(self, err: GatewayError) -> bytes:
        return sse.data(err.envelope())

    def end(self) -> bytes:
        return sse.DONE

    def encode(self, event: StrategyEvent) -> list[bytes]:
        if isinstance(event, Progress):
            return [sse.comment(sse.PROGRESS, event.data)]
        if isinstance(event, ChoiceDelta):
            usage = self._usage_so_far(event) if self._continuous else None
            # Tokens without text yet still get a chunk, as vLLM's server sends one per
            # engine output (chat: an empty delta, which starts neither reasoning nor
            # content in a client).
            bodies = self._delta(event) or [render.delta_choice(self._env.kind, event.index)]
            return [self._chunk(c, usage) for c in bodies]
        return self._final(event)

    def _usage_so_far(self, d: ChoiceDelta) -> Body:
        if d.completion_tokens is not None:
            self._generated[d.index] = d.completion_tokens
        done = sum(self._generated.values())
        return {
            "prompt_tokens": self._prompt_tokens,
            "completion_tokens": done,
            "total_tokens": self._prompt_tokens + done,
        }

    def _delta(self, d: ChoiceDelta) -> list[Body]:
        kind = self._env.kind
        out: list[Body] = []
        if d.index not in self._started:
            self._started.add(d.index)
            if kind == "chat":
                out.append(render.delta_choice(kind, d.index, role=True))
        if d.reasoning:
            out.append(render.delta_choice(kind, d.index, reasoning=d.reasoning))
        # With tools offered the answer is held back: what looks like text may be a call,
        # sent as tool_calls once the choice ends (_final).
        content = "" if self._tools is not None else d.content
        if content:
            out.append(render.delta_choice(kind, d.index, content=content))
        if d.logprobs is not None:
            # One delta's tokens may end the thinking and start the answer: their
            # logprobs ride on its last chunk (an empty one when it has no text).
            if not (d.reasoning or content):
                out.append(render.delta_choice(kind, d.index))
            out[-1]["logprobs"] = self._logprobs(d.index, d.logprobs)
        return out

    def _logprobs(self, index: int, entries: tuple[LogprobEntry, ...]) -> Body:
        if self._env.kind == "chat":
            return render.chat_logprobs(entries)
        body, self._offsets[index] = render.completion_logprobs(
            entries, offset=self._offsets.get(index, 0)
        )
        return body

    def _final(self, final: Result) -> list[bytes]:
        frames: list[bytes] = []
        choices = sorted(final.choices, key=lambda c: c.index)
        usage = render.usage_body(final.usage)
        every = usage if self._continuous else None  # the result's usage on every chunk
        for c in choices:
            if c.index not in self._started:  # not streamed live: replay it whole
                replay = ChoiceDelta(
                    index=c.index, reasoning=c.reasoning, content=c.content, logprobs=c.logprobs
                )
                frames += [self._chunk(body, every) for body in self._delta(replay)]
        finishes: dict[int, str] = {}
        if self._tools is not None:  # the held answers: text, then calls
            for c in choices:
                answer = render.called(c, self._tools)
                finishes[c.index] = answer.finish_reason
                if answer.content:
                    body = render.delta_choice("chat", c.index, content=answer.content)
                    frames.append(self._chunk(body, every))
                for piece in render.call_pieces(answer.calls):
                    body = render.delta_choice("chat", c.index, tool_calls=[piece])
                    frames.append(self._chunk(body, every))
        for i, c in enumerate(choices):
            body = render.delta_choice(
                self._env.kind,
                c.index,
                finish_reason=finishes.get(c.index, c.finish_reason),
                info=c.info,
            )
            extra: dict[str, object] = {"usage": every} if every is not None else {}
            if i == len(choices) - 1:
                extra["thinkgate"] = self._env.thinkgate(final)
            frames.append(sse.data(render.chunk(self._env, [body], **extra)))
        if self._include_usage:
            frames.append(sse.data(render.chunk(self._env, [], usage=usage)))
        return frames

    def _chunk(self, choice: Body, usage: Body | None = None) -> bytes:
        if usage is None:
            return sse.data(render.chunk(self._env, [choice]))
        return sse.data(render.chunk(self._env, [choice], usage=usage))


async def sse_body(
    *,
    first: Item,
    run: StreamRun,
    gw: Gateway,
    strategy: str,
    route: str,
    request_id: str,
    started: float,
    on_end: Callable[[Result | None], None],
    announce: bool = True,
    tenant: str | None = None,
) -> AsyncIterator[bytes]:
    """The body of a streamed response; ``on_end`` runs however it ends.

    ``first`` is what ``run`` gave before the headers went: frames, or ``KEEPALIVE``
    when the first event was not there in time: the body then opens with a progress
    comment if ``announce`` (multi-sample strategies), else waits for the first event
    (live strategies: see the module doc)."""
    status = "200"
    result: Result | None = None
    timeout = gw.settings.request_timeout_s
    keepalive_s = gw.settings.sse_keepalive_s
    frame_wait = gw.metrics.frame_wait
    try:
        async with asyncio.timeout(timeout):
            item = first
            if item is KEEPALIVE:
                if announce:
                    yield sse.comment(sse.PROGRESS, {"status": "admitted", "strategy": strategy})
                item = await run.next(keepalive_s)
            while True:
                if isinstance(item, bytes):
                    yield item
                    # Resumed once the send returned: the frame's whole stay in the gateway.
                    frame_wait.observe(time.perf_counter() - run.waiting_since)
                elif isinstance(item, Done):
                    yield item.frames
                    frame_wait.observe(time.perf_counter() - run.waiting_since)
                    result = item.final
                    break
                elif item is KEEPALIVE:
                    yield sse.KEEPALIVE
                elif item is ABORTED:
                    raise BackendUnavailable(
                        "the server shut down before this request finished; retry",
                        code="shutting_down",
                    )
                elif isinstance(item, Exception):
                    raise item
                item = await run.next(keepalive_s)
        yield run.encoder.end()
    except asyncio.CancelledError:
        status = "499"
        gw.metrics.aborted.labels("client_disconnect").inc()
        raise
    except Exception as exc:
        err = _as_gateway_error(exc)
        status = str(err.status)
        gw.metrics.aborted.labels("shutdown" if err.code == "shutting_down" else "error").inc()
        message = loggable(err, gw.settings.log_content)
        log.error("stream.error", request_id=request_id, status=err.status, message=message)
        yield run.encoder.error(err)
    finally:
        on_end(result)  # the tenant is billed the result's usage
        record_end(
            gw.metrics,
            route=route,
            strategy=strategy,
            status=status,
            request_id=request_id,
            started=started,
            result=result,
            detail={"stream": True},
            tenant=tenant,
        )


def _as_gateway_error(exc: Exception) -> GatewayError:
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, TimeoutError):
        from core.errors import BackendTimeout

        return BackendTimeout("the request ran past the server's request_timeout_s")
    from engines.errors import unexpected

    return unexpected(exc)
