"""Strategy events -> SSE bytes.

Live strategies: a role chunk per choice, then its reasoning deltas, then its content
deltas. Multi-sample strategies: each ``Progress`` as a comment line, then ``Final``'s
choices replayed as normal chunks (reasoning, then content). In both, the chunks with
``finish_reason`` come once ``Final`` is known; the last one carries ``thinkgate``.
Then a usage chunk (``stream_options.include_usage``) and ``[DONE]``. A failure after
the first byte is one ``data: {"error": ...}`` frame, then the stream closes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping

import structlog
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from server import render, sse
from server.aio import aclose_quietly, closing
from server.render import Body, Envelope
from server.state import Gateway
from strategies.base import ChoiceDelta, Final, Progress, StrategyEvent
from strategies.errors import BackendError, GatewayError

log = structlog.get_logger("thinkgate.http")

# Detached clean-ups (strong references until they finish).
_CLEANUPS: set[asyncio.Task[None]] = set()


class EventStreamResponse(StreamingResponse):
    """An SSE response that cleans up however it ends, even when its body never started
    (the client left between the first event and the first byte): ``on_end`` runs and
    the strategy's events are closed, which aborts their engine requests. The close runs
    in its own task, so a cancel scope that keeps cancelling this one cannot stop it."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        *,
        events: AsyncIterator[StrategyEvent],
        on_end: Callable[[], None],
        headers: Mapping[str, str],
    ) -> None:
        super().__init__(body, media_type="text/event-stream", headers=headers)
        self._events = events
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_end()
            task = asyncio.get_running_loop().create_task(aclose_quietly(self._events))
            _CLEANUPS.add(task)
            task.add_done_callback(_CLEANUPS.discard)


class StreamEncoder:
    def __init__(self, env: Envelope, *, include_usage: bool) -> None:
        self._env = env
        self._include_usage = include_usage
        self._started: set[int] = set()

    def encode(self, event: StrategyEvent) -> list[bytes]:
        if isinstance(event, Progress):
            return [sse.comment(sse.PROGRESS, event.data)]
        if isinstance(event, ChoiceDelta):
            return [self._chunk(c) for c in self._delta(event)]
        return self._final(event)

    def _delta(self, d: ChoiceDelta) -> list[Body]:
        kind = self._env.kind
        out: list[Body] = []
        if d.index not in self._started:
            self._started.add(d.index)
            if kind == "chat":
                out.append(render.delta_choice(kind, d.index, role=True))
        if d.reasoning:
            out.append(render.delta_choice(kind, d.index, reasoning=d.reasoning))
        if d.content:
            out.append(render.delta_choice(kind, d.index, content=d.content))
        return out

    def _final(self, final: Final) -> list[bytes]:
        frames: list[bytes] = []
        choices = sorted(final.choices, key=lambda c: c.index)
        for c in choices:
            if c.index not in self._started:  # not streamed live: replay it whole
                replay = ChoiceDelta(index=c.index, reasoning=c.reasoning, content=c.content)
                frames += [self._chunk(body) for body in self._delta(replay)]
        for i, c in enumerate(choices):
            body = render.delta_choice(
                self._env.kind, c.index, finish_reason=c.finish_reason, info=c.info
            )
            extra = {"thinkgate": self._env.thinkgate(final)} if i == len(choices) - 1 else {}
            frames.append(sse.data(render.chunk(self._env, [body], **extra)))
        if self._include_usage:
            usage = render.usage_body(final.usage)
            frames.append(sse.data(render.chunk(self._env, [], usage=usage)))
        return frames

    def _chunk(self, choice: Body) -> bytes:
        return sse.data(render.chunk(self._env, [choice]))


async def sse_body(
    *,
    first: StrategyEvent,
    events: AsyncIterator[StrategyEvent],
    encoder: StreamEncoder,
    gw: Gateway,
    strategy: str,
    route: str,
    request_id: str,
    started: float,
    on_end: Callable[[], None],
) -> AsyncIterator[bytes]:
    """The body of a streamed response; ``on_end`` runs however it ends."""
    status = "200"
    timeout = gw.settings.request_timeout_s
    try:
        async with closing(events), asyncio.timeout(timeout):
            event = first
            while True:
                for frame in encoder.encode(event):
                    yield frame
                if isinstance(event, Final):
                    gw.metrics.record_final(strategy, event)
                    break
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    raise BackendError(f"strategy {strategy!r} ended without a result") from None
        yield sse.DONE
    except asyncio.CancelledError:
        status = "499"
        gw.metrics.aborted.labels("client_disconnect").inc()
        raise
    except Exception as exc:
        err = _as_gateway_error(exc)
        status = str(err.status)
        gw.metrics.aborted.labels("error").inc()
        log.error("stream.error", request_id=request_id, status=err.status, message=err.message)
        yield sse.data(err.envelope())
    finally:
        on_end()
        gw.metrics.requests.labels(route, strategy, status).inc()
        gw.metrics.latency.labels(route, strategy).observe(time.perf_counter() - started)
        log.info(
            "request.end",
            request_id=request_id,
            route=route,
            strategy=strategy,
            status=status,
            stream=True,
            seconds=round(time.perf_counter() - started, 4),
        )


def _as_gateway_error(exc: Exception) -> GatewayError:
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, TimeoutError):
        from strategies.errors import BackendTimeout

        return BackendTimeout("the request ran past the server's request_timeout_s")
    from server.engines.errors import unexpected

    return unexpected(exc)
