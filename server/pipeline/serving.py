"""The request pipeline shared by every generation route: the route-facing ``serve``
and ``serve_translated``, and the response side (JSON or SSE).

/v1/chat/completions and /v1/completions run it directly; /v1/responses and
/v1/messages translate their body into the chat request it runs (``Translation``) and
translate the strategy's result and events back into their own format.

Everything a client can get wrong is checked before any engine call, then the request
is admitted or refused (``server.pipeline.admit``), then the strategy runs. A client
that disconnects cancels the strategy task, which aborts every engine request it holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import orjson
from starlette.requests import Request
from starlette.responses import Response

from core.base import Choice, Result, StrategyEvent
from core.errors import BackendError, BackendTimeout, BackendUnavailable, GatewayError
from server.apis import chat_translation
from server.apis.openai.protocol import ChatCompletionRequest
from server.apis.openai.render import Body, Envelope, Kind, response_body
from server.errors import ClientGone
from server.gateway import Gateway
from server.pipeline.admit import Admitted, admit
from server.pipeline.streaming import (
    ABORTED,
    FIRST_EVENT_WAIT_S,
    Encoder,
    EventStreamResponse,
    StreamRun,
    sse_body,
)
from server.process.metrics import record_end

T = TypeVar("T")


class Translation(Protocol):
    """A request of another API, as the chat request the pipeline runs, and the way back
    (``server.apis.responses.render.ResponsesCall``,
    ``server.apis.messages.render.MessagesCall``)."""

    @property
    def chat(self) -> ChatCompletionRequest:
        """The chat request this body means (one choice)."""
        ...

    @property
    def id_prefix(self) -> str:
        """The response id's prefix (``resp_``, ``msg_``); the request id follows."""
        ...

    @property
    def renames(self) -> Mapping[str, str]:
        """Chat field -> this API's field, for the errors the pipeline finds."""
        ...

    @property
    def ignored(self) -> tuple[str, ...]:
        """The platform fields the request set that change nothing
        (``server.apis.openai.sdk_fields``)."""
        ...

    def body(self, env: Envelope, final: Result) -> Body:
        """The whole non-streamed response."""
        ...

    def encoder(self, env: Envelope, prompt_tokens: int) -> Encoder:
        """The encoder of the streamed response."""
        ...


async def serve(request: Request, kind: Kind) -> Response:
    """Answer one chat or completions request (JSON or SSE)."""
    adm, stream = await admit(request, kind)
    if stream:
        return await _stream_response(request, adm, adm.encoder())
    return await _json_response(request, adm, lambda final: response_body(adm.env, final))


async def serve_translated(request: Request, translate: Callable[[bytes], Translation]) -> Response:
    """Answer a request of another API: ``translate`` parses its body (raising
    ``InvalidRequest`` naming the field) into the chat request the pipeline runs."""
    translations: list[Translation] = []

    def parse(raw: bytes) -> ChatCompletionRequest:
        translations.append(translate(raw))
        request.state.ignored = translations[0].ignored
        return translations[0].chat

    try:
        adm, stream = await admit(request, "chat", parse)
    except GatewayError as exc:
        if translations:  # name the route's own field
            chat_translation.renamed(exc, translations[0].renames)
        raise
    tr = translations[0]
    asked, ran = tr.chat.max_tokens, adm.contexts[0].request.sampling.max_tokens
    env = replace(
        adm.env,
        response_id=f"{tr.id_prefix}{adm.request_id}",
        capped_by_context=asked is not None and ran is not None and ran < asked,
    )
    adm = replace(adm, env=env)
    if stream:
        prompt_tokens = len(adm.contexts[0].request.prompt_token_ids)
        return await _stream_response(request, adm, tr.encoder(env, prompt_tokens))
    return await _json_response(request, adm, lambda final: tr.body(env, final))


async def _json_response(
    request: Request, adm: Admitted, render: Callable[[Result], Body]
) -> Response:
    gw = adm.gw
    try:
        runs = adm.runs()
        final = await until_disconnect(request, _drain_all(runs), gw.settings.request_timeout_s, gw)
    except BaseException:
        adm.slot.release()
        raise
    adm.ended(final)
    record_end(
        gw.metrics,
        route=adm.route,
        strategy=adm.name,
        status="200",
        request_id=adm.request_id,
        started=adm.started,
        result=final,
        tenant=adm.tenant,
    )
    content = orjson.dumps(render(final))
    return Response(content, media_type="application/json", headers=adm.headers)


async def _stream_response(request: Request, adm: Admitted, encoder: Encoder) -> Response:
    """Streams: the strategy runs in its own task (``StreamRun``); the headers wait for its
    first event (so that errors the engine raises at once, like bad sampling values, keep
    their real status code), but not longer than FIRST_EVENT_WAIT_S: a strategy that draws
    many samples first opens with a progress comment, then keep-alives; a live one sends
    nothing before its first token (``server.pipeline.streaming``)."""
    gw = adm.gw
    run = StreamRun(
        adm.runs()[0],
        encoder,
        strategy=adm.name,
        aborting=gw.lifecycle.aborting,
    )
    wait_s = min(FIRST_EVENT_WAIT_S, gw.settings.sse_keepalive_s)
    try:
        first = await until_disconnect(request, run.next(wait_s), gw.settings.request_timeout_s, gw)
        if first is ABORTED:
            raise _shutting_down()
        if isinstance(first, Exception):
            raise first
    except BaseException:
        adm.slot.release()
        await run.aclose()
        raise
    stream = sse_body(
        first=first,
        run=run,
        gw=gw,
        strategy=adm.name,
        route=adm.route,
        request_id=adm.request_id,
        started=adm.started,
        on_end=adm.ended,
        announce=not adm.strategy.streams_live,
        tenant=adm.tenant,
    )
    headers = {**adm.headers, "Cache-Control": "no-cache"}
    return EventStreamResponse(stream, run=run, on_end=adm.slot.release, headers=headers)


async def until_disconnect(
    request: Request, aw: Awaitable[T], timeout: float | None, gw: Gateway
) -> T:
    """Await ``aw`` in its own task; cancel it if the client goes away, time runs out, or
    the server's drain time is up (a 503)."""
    task: asyncio.Future[T] = asyncio.ensure_future(aw)
    watcher: asyncio.Future[None] = asyncio.ensure_future(_disconnected(request))
    aborting = gw.lifecycle.aborting
    waiting: set[asyncio.Future[Any]] = {task, watcher, aborting}
    try:
        done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task in done:
        return task.result()
    if watcher in done:
        gw.metrics.aborted.labels("client_disconnect").inc()
        raise ClientGone()
    if aborting in done:
        gw.metrics.aborted.labels("shutdown").inc()
        raise _shutting_down()
    gw.metrics.aborted.labels("timeout").inc()
    raise BackendTimeout(f"the request ran past the server's request_timeout_s ({timeout} s)")


def _shutting_down() -> BackendUnavailable:
    return BackendUnavailable(
        "the server shut down before this request finished; retry", code="shutting_down"
    )


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
        # Once the body is read, a receive() may answer at once with an empty
        # http.request (seen after a streamed response on the same server): without a
        # pause this loop would hold the event loop for the whole request.
        await asyncio.sleep(0.05)


async def _drain_all(runs: list[AsyncGenerator[StrategyEvent, None]]) -> Result:
    """One prompt's result, or several run side by side and merged (a prompt list):
    their choices in prompt order, indexed on from the previous prompt's last."""
    if len(runs) == 1:
        return await _drain(runs[0])
    tasks = [asyncio.ensure_future(_drain(r)) for r in runs]
    try:
        finals = await asyncio.gather(*tasks)
    finally:  # one failed or the request was cancelled: the others stop too
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    choices: list[Choice] = []
    for f in finals:
        for c in sorted(f.choices, key=lambda c: c.index):
            choices.append(replace(c, index=len(choices)))
    usage = finals[0].usage
    for f in finals[1:]:
        usage = usage + f.usage
    return Result(
        choices=tuple(choices),
        usage=usage,
        samples=sum(f.samples for f in finals),
        info={"prompts": [dict(f.info) for f in finals]},
    )


async def _drain(events: AsyncGenerator[StrategyEvent, None]) -> Result:
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Result):
                return event
    raise BackendError("the strategy ended without a result")
