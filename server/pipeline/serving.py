"""The request pipeline shared by every generation route.

/v1/chat/completions and /v1/completions run it directly; /v1/responses and
/v1/messages translate their body into the chat request it runs (``Translation``) and
translate the strategy's result and events back into their own format.

Order matters: everything a client can get wrong (auth, body, model, strategy,
budget, sampling fields, prompt length) is checked before any engine call, then the
request is admitted (or refused with a 429), then the strategy runs. A client that
disconnects cancels the strategy task, which aborts every engine request it holds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import orjson
import structlog
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from core.allowance import Allowance, Limits
from core.base import (
    Choice,
    Result,
    Strategy,
    StrategyContext,
    StrategyEvent,
    StrategyRequest,
)
from core.budget import Budget
from core.engine import SamplingConfig
from core.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    GatewayError,
    InvalidRequest,
    OverTenantLimit,
    PayloadTooLarge,
    RequestTimeout,
)
from server import presets
from server.apis import chat_translation
from server.apis.openai import sdk_fields
from server.apis.openai.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIBody,
    parse_body,
    set_fields,
)
from server.apis.openai.render import Body, Envelope, Kind, response_body
from server.errors import ClientGone, request_id, response_headers
from server.gateway import Gateway, gateway
from server.pipeline import budgets, effort
from server.pipeline.answer_fields import format_asked, logprobs_asked, tools_asked
from server.pipeline.request_engine import RequestEngine, Tally, with_tally
from server.pipeline.streaming import (
    ABORTED,
    FIRST_EVENT_WAIT_S,
    Encoder,
    EventStreamResponse,
    StreamEncoder,
    StreamRun,
    sse_body,
)
from server.process.metrics import record_end, route_label
from server.tenancy.admission import Slot
from server.tenancy.auth import authorize, is_batch_line
from server.tenancy.tenants import Tenant
from strategies.reasoning import thinking_open_after

log = structlog.get_logger("thinkgate.http")
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


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request that passed every check and holds its admission slot."""

    gw: Gateway
    strategy: Strategy
    name: str  # the strategy's name
    contexts: tuple[StrategyContext, ...]  # one per prompt
    slot: Slot
    echoes: tuple[str, ...]  # completions' echo: each prompt's text (empty: no echo)
    env: Envelope
    headers: dict[str, str]
    route: str
    request_id: str
    started: float
    include_usage: bool
    continuous_usage: bool  # usage on every chunk (vLLM's continuous_usage_stats)
    limits: Limits  # each prompt's ceiling (a share of the request's) and deadline
    tenant: str
    objective: str  # interactive, or batch (a Batch API line): the fleet's objective
    # Each prompt's account, once its run began: what an unanswered request is billed.
    allowances: list[Allowance]

    def runs(self) -> list[AsyncGenerator[StrategyEvent, None]]:
        """The strategy's run per prompt, each over the engine as its request sees it
        (``server.pipeline.request_engine``: affinity key, redraws billed, ceiling and clock)."""
        out: list[AsyncGenerator[StrategyEvent, None]] = []
        for i, ctx in enumerate(self.contexts):
            tally = Tally()
            allowance = Allowance(limits=self.limits, speed=self.gw.speed)
            self.allowances.append(allowance)
            engine = RequestEngine(
                ctx.engine,
                tally,
                affinity=ctx.request.request_id,
                tenant=self.tenant,
                objective=self.objective,
                allowance=allowance,
                answer_reserve=self.gw.settings.answer_reserve,
            )
            run = with_tally(
                self.strategy.run(replace(ctx, engine=engine, allowance=allowance)),
                tally,
                allowance,
            )
            out.append(_with_echo(run, self.echoes[i]) if self.echoes else run)
        return out

    def ended(self, result: Result | None = None) -> None:
        """The request is over: its slot released, its tenant billed ``result``'s usage,
        and (``log_content`` only: never by default) its prompt and answers logged."""
        self.slot.release(result)
        if result is not None and self.gw.settings.log_content:
            decode = self.gw.engine.tokens.decode
            log.info(
                "request.content",
                request_id=self.request_id,
                prompts=[decode(ctx.request.prompt_token_ids) for ctx in self.contexts],
                answers=[c.content for c in result.choices],
            )

    def encoder(self) -> Encoder:
        """The OpenAI chunk encoder of this request's stream."""
        return StreamEncoder(
            self.env,
            include_usage=self.include_usage,
            continuous_usage=self.continuous_usage,
            prompt_tokens=len(self.contexts[0].request.prompt_token_ids),
        )


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


def _ignored_in_messages(body: ChatCompletionRequest) -> tuple[str, ...]:
    """The keys inside chat messages that are accepted and change nothing, as
    ``X-Thinkgate-Ignored`` names them (``server.apis.openai.sdk_fields.PART_FIELDS``)."""
    # Only the keys asked of, on every request: a long conversation is not dumped whole.
    in_turns = set(sdk_fields.PART_FIELDS["chat.role.assistant"])
    in_parts = set(sdk_fields.PART_FIELDS["chat.content.text"])
    turns = [
        m.model_dump(include=in_turns, exclude_none=True)
        for m in body.messages
        if m.role == "assistant"
    ]
    parts = [
        p.model_dump(include=in_parts, exclude_none=True)
        for m in body.messages
        if isinstance(m.content, list)
        for p in m.content
    ]
    return (
        *sdk_fields.part_ignored("messages", "chat.role.assistant", turns),
        *sdk_fields.part_ignored("messages.content", "chat.content.text", parts),
    )


async def admit(
    request: Request, kind: Kind, parse: Callable[[bytes], OpenAIBody] | None = None
) -> tuple[Admitted, bool]:
    """Every check a client can fail, then the admission slot; ``(admitted, stream)``.
    ``parse`` reads the raw body (default: the OpenAI model of ``kind``)."""
    started = time.perf_counter()
    rid = request_id(request)
    structlog.contextvars.bind_contextvars(request_id=rid)
    gw = gateway(request)
    settings = gw.settings
    tenant = authorize(request, gw.keys)
    raw = await read_body(request, settings.max_body_bytes, tenant=tenant)
    # Cheap refusals first: a draining (503 with Retry-After) or full server does not parse
    # or tokenise (a drain that starts later still waits for, or aborts, what it admits).
    # The body is read all the same: a connection whose body was left unread is closed
    # after the answer, and a client reusing it can meet the close (transport errors).
    gw.lifecycle.check_admission()
    gw.admission.check_room(tenant)
    body: OpenAIBody
    if parse is not None:
        body = parse(raw)  # a translation notes its own route's ignored fields
    else:
        if kind == "chat":
            body = parse_body(ChatCompletionRequest, raw)
        else:
            body = parse_body(CompletionRequest, raw)
        table = sdk_fields.CHAT if kind == "chat" else sdk_fields.COMPLETIONS
        request.state.ignored = sdk_fields.ignored(table, set_fields(body))
        if isinstance(body, ChatCompletionRequest):
            request.state.ignored += _ignored_in_messages(body)
    preset = presets.resolve(body.model, gw.engine.model_name, gw.presets)
    chosen, body_budget = presets.applied(preset, body.strategy, body.budget)
    honoured = {name: gw.registry.get(name).budget_fields for name in gw.registry.names()}
    fields = {
        "strategy": chosen,
        "budget": body_budget,
        "reasoning_effort": body.reasoning_effort,
    }
    name, budget = budgets.resolve(
        request.headers,
        fields,
        settings,
        honoured=honoured,
        context=gw.effort_context or gw.engine.max_model_len,
        tenant=tenant,
    )
    request.state.budget = budget
    request.state.strategy = name
    strategy = gw.registry.get(name)
    options = body.options()
    gw.registry.check_options(name, options)
    if body.n > settings.max_n:
        raise InvalidRequest(f"n is {body.n}; this server's cap is {settings.max_n}", param="n")
    prompts = _prompts(gw, body)
    if len(prompts) > 1 and body.stream:
        raise InvalidRequest(
            "stream with a list of prompts is not supported; stream one prompt per request "
            "or send the list without stream",
            param="stream",
        )
    per_prompt = max(body.n, budget.samples or 1)
    _check_tenant_request(tenant, body, prompts, per_prompt, request.headers)
    if per_prompt * len(prompts) > settings.max_inflight_samples:
        raise InvalidRequest(
            f"{len(prompts)} prompts x {per_prompt} samples exceed this server's "
            f"{settings.max_inflight_samples} samples in flight; send fewer prompts at once",
            param="prompt",
        )
    client_k, echo = logprobs_asked(body, strategy, name)
    structured = format_asked(gw, body, strategy, name)
    form, forced = tools_asked(gw, body, strategy, name, structured)
    structured = forced or structured  # with tools, the grammar holds the format too
    samplings = [
        replace(
            _sampling(gw, body, len(prompt_ids)),
            token_logprobs=client_k,
            prompt_logprobs=client_k if echo else None,
            structured=structured,
        )
        for prompt_ids in prompts
    ]
    # The thinking budget leaves the answer room under the output limit (server.pipeline.effort).
    budget = effort.fit_output(
        budget,
        samplings[0].max_tokens,
        end_tokens=len(gw.engine.tokens.think_end_ids),
        reserve=settings.answer_reserve,
    )
    request.state.budget = budget
    limits = _limits(gw, budget, started, len(prompts))
    budgets.check_ceiling(budget, limits.answer, request.headers)
    sreqs = [
        StrategyRequest(
            # Engine ids are ours and unique: the client's X-Request-Id is for logs and the
            # response header only (two clients sending one id must not abort each other).
            request_id=f"{rid[:64]}-{uuid.uuid4().hex[:16]}",
            prompt_token_ids=prompt_ids,
            thinking_open=thinking_open_after(prompt_ids, gw.engine.tokens),
            n=body.n,
            sampling=sampling,
            budget=budget,
            stream=body.stream,
            options=options,
            tools=form is not None and form.kind == "tags",
        )
        for prompt_ids, sampling in zip(prompts, samplings, strict=True)
    ]
    for sreq in sreqs:
        strategy.validate(sreq, gw.engine)
    await gw.engine.health()
    reserve = _worst_case(gw, budget, samplings, prompts, per_prompt)
    slot = await gw.admission.acquire(tenant, per_prompt * len(prompts), reserve)
    allowances: list[Allowance] = []
    # Unanswered (a client gone, an error): billed what its calls committed, the tokens
    # the gateway saw generated (known where a ceiling or deadline metered the calls).
    slot.spent = lambda: sum(a.committed for a in allowances)
    admitted = Admitted(
        gw=gw,
        strategy=strategy,
        name=name,
        contexts=tuple(
            StrategyContext(engine=gw.engine, request=r, resources=gw.resources) for r in sreqs
        ),
        slot=slot,
        echoes=_echoes(gw, body, prompts) if echo else (),
        env=replace(Envelope.new(kind, rid, gw.engine.model_name, name, budget), tools=form),
        headers=response_headers(request),
        route=route_label(request),
        request_id=rid,
        started=started,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        # As vLLM: continuous usage only together with include_usage.
        continuous_usage=bool(
            body.stream_options
            and body.stream_options.include_usage
            and body.stream_options.continuous_usage_stats
        ),
        limits=limits,
        tenant=tenant.name,
        objective="batch" if is_batch_line(request) else "interactive",
        allowances=allowances,
    )
    return admitted, body.stream


def _check_tenant_request(
    tenant: Tenant,
    body: ChatCompletionRequest | CompletionRequest,
    prompts: list[tuple[int, ...]],
    per_prompt: int,
    headers: Mapping[str, str],
) -> None:
    """The tenant's limits on the request itself: its messages, prompts and samples
    (``OverTenantLimit``, a 400 naming the field and the limit)."""
    limits, name = tenant.limits, tenant.name
    if (cap := limits.budget_samples) is not None and body.n > cap:
        raise OverTenantLimit(
            f"n is {body.n}; tenant {name!r} may ask for at most {cap} samples",
            param="n",
            limit="budget_samples",
        )
    cap = limits.max_messages
    if isinstance(body, ChatCompletionRequest) and cap is not None and len(body.messages) > cap:
        raise OverTenantLimit(
            f"messages holds {len(body.messages)} messages; tenant {name!r} may send at most {cap}",
            param="messages",
            limit="max_messages",
        )
    if (cap := limits.max_prompt_tokens) is not None:
        for i, ids in enumerate(prompts):
            if len(ids) > cap:
                param = "messages" if isinstance(body, ChatCompletionRequest) else "prompt"
                if len(prompts) > 1:
                    param = f"prompt.{i}"
                raise OverTenantLimit(
                    f"the prompt has {len(ids)} tokens; tenant {name!r} may send at most {cap}",
                    param=param,
                    limit="max_prompt_tokens",
                )
    if (cap := limits.max_inflight_samples) is not None and per_prompt * len(prompts) > cap:
        asked = budgets.HEADERS["samples"]
        param = asked if asked.lower() in {k.lower() for k in headers} else "budget.samples"
        raise OverTenantLimit(
            f"{len(prompts)} prompts x {per_prompt} samples exceed the {cap} samples tenant "
            f"{name!r} may have in flight",
            param="n" if body.n == per_prompt else param,
            limit="max_inflight_samples",
        )


def _worst_case(
    gw: Gateway,
    budget: Budget,
    samplings: list[SamplingConfig],
    prompts: list[tuple[int, ...]],
    per_prompt: int,
) -> int:
    """The completion tokens a request may spend at most: its ceiling, or every sample
    of every prompt to its ``max_tokens`` (the context, without one). What the tenant's
    token rate reserves at admission; the real usage is settled at the end."""
    if budget.tokens is not None:
        return budget.tokens
    room = gw.engine.max_model_len
    return sum(
        per_prompt * (s.max_tokens if s.max_tokens is not None else room - len(p))
        for s, p in zip(samplings, prompts, strict=True)
    )


def _limits(gw: Gateway, budget: Budget, started: float, prompts: int) -> Limits:
    """The request's ceiling (split evenly over a list of prompts) and its deadline,
    counted from its arrival (``started``, on ``time.perf_counter``)."""
    answer = gw.settings.answer_reserve + len(gw.engine.tokens.think_end_ids) + 1
    deadline = wall = None
    if budget.deadline_ms is not None:
        deadline = started + budget.deadline_ms / 1000
        wall = time.time() + (deadline - time.perf_counter())
    return Limits(
        tokens=None if budget.tokens is None else budget.tokens // max(1, prompts),
        deadline=deadline,
        wall_deadline=wall,
        answer=answer,
        margin_s=gw.settings.deadline_margin_ms / 1000,
    )


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


async def read_body(request: Request, limit: int, *, tenant: Tenant | None = None) -> bytes:
    """The raw body, refusing more than ``limit`` bytes (or the tenant's
    ``max_body_bytes``, if lower) with a 413 before reading it all, and a body that takes
    longer than the server's ``body_read_timeout_s`` to arrive (408)."""
    gw = getattr(request.app.state, "gateway", None)
    timeout = gw.settings.body_read_timeout_s if gw is not None else None
    whose, owner = "the limit", None
    if tenant is not None and (own := tenant.limits.max_body_bytes) is not None and own < limit:
        limit, whose, owner = own, f"tenant {tenant.name!r}'s limit", tenant.name

    def too_large(message: str) -> PayloadTooLarge:
        if owner is not None and gw is not None:
            gw.metrics.tenant_rejected(owner, "max_body_bytes")
        return PayloadTooLarge(message)

    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(f"the body is {declared} bytes; {whose} is {limit}")
    chunks: list[bytes] = []
    size = 0
    try:
        # A client that announces a body and sends it slowly (or never) would otherwise
        # hold its connection and this handler forever.
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(f"the body exceeds {whose} of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {timeout} s ({size} bytes came)"
        ) from None
    except ClientDisconnect:
        # Gone before its body arrived: the client's doing, not a server error (was a 500).
        if gw is not None:
            gw.metrics.aborted.labels("client_disconnect").inc()
        raise ClientGone() from None
    return b"".join(chunks)


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


def _prompts(gw: Gateway, body: ChatCompletionRequest | CompletionRequest) -> list[tuple[int, ...]]:
    """Prompt ids: the chat's, or each completions prompt's (``prompt.i`` names one of a
    list in errors)."""
    if isinstance(body, ChatCompletionRequest):
        return [_prompt_ids(gw, body, "messages")]
    prompts = body.prompts
    if len(prompts) == 1:
        return [_prompt_ids(gw, prompts[0], "prompt")]
    return [_prompt_ids(gw, p, f"prompt.{i}") for i, p in enumerate(prompts)]


def chat_prompt_ids(gw: Gateway, body: ChatCompletionRequest) -> list[int]:
    """The prompt a chat request renders to (the chat template, its tools offered), not
    held to the context: what the token-count routes count."""
    tokens = gw.engine.tokens
    messages = [m.for_template() for m in body.messages]
    offered = body.offered_tools()
    try:
        return list(
            tokens.render_chat(messages, offered) if offered else tokens.render_chat(messages)
        )
    except Exception as exc:  # a template that refuses the conversation (jinja raise)
        raise InvalidRequest(
            f"the chat template refused the messages: {exc}", param="messages"
        ) from exc


def _prompt_ids(
    gw: Gateway, source: ChatCompletionRequest | str | list[int], param: str
) -> tuple[int, ...]:
    tokens = gw.engine.tokens
    if isinstance(source, ChatCompletionRequest):
        messages = [m.for_template() for m in source.messages]
        offered = source.offered_tools()
        try:
            ids = tokens.render_chat(messages, offered) if offered else tokens.render_chat(messages)
        except Exception as exc:  # a template that refuses the conversation (jinja raise)
            raise InvalidRequest(
                f"the chat template refused the messages: {exc}", param=param
            ) from exc
    else:
        if isinstance(source, str):
            if not source:
                raise InvalidRequest(f"{param} is empty", param=param)
            ids = tokens.encode(source)
        else:
            ids = list(source)
            # Ids past the vocabulary are refused by the engine (a 400 naming them).
            if any(t < 0 for t in ids):
                raise InvalidRequest("prompt holds a negative token id", param=param)
            # Past int32 an id is no model's token, and past int64 it cannot even be sent to
            # a remote server (found by the fuzz: a 500).
            if any(t >= 2**31 for t in ids):
                raise InvalidRequest("prompt holds a token id past 2**31", param=param)
    if not ids:  # text the tokenizer drops entirely; vLLM would refuse it unnamed
        raise InvalidRequest("the prompt tokenises to no tokens", param=param)
    limit = gw.engine.max_model_len
    if len(ids) >= limit:
        raise InvalidRequest(
            f"the prompt has {len(ids)} tokens; the model's context is {limit}", param=param
        )
    return tuple(ids)


def _echoes(gw: Gateway, body: OpenAIBody, prompts: list[tuple[int, ...]]) -> tuple[str, ...]:
    """Each prompt's text as completions' ``echo`` returns it: as sent, or decoded ids."""
    sent = body.prompts if isinstance(body, CompletionRequest) else []
    return tuple(
        p if isinstance(p, str) else gw.engine.tokens.decode(ids)
        for p, ids in zip(sent, prompts, strict=True)
    )


async def _with_echo(
    events: AsyncGenerator[StrategyEvent, None], echo: str
) -> AsyncGenerator[StrategyEvent, None]:
    """``events`` with the prompt's text on each choice of the result (``echo``)."""
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Result):
                event = replace(event, choices=tuple(replace(c, echo=echo) for c in event.choices))
            yield event


def _logit_bias(gw: Gateway, body: ChatCompletionRequest | CompletionRequest) -> dict[int, float]:
    """``logit_bias`` by token id, every id inside the served tokenizer's vocabulary:
    vLLM 0.32 does not check them, and an id past the logits row fails inside the engine
    (every request in flight with it)."""
    bias = body.logit_bias_ids()
    vocab = gw.engine.tokens.vocab_size
    if bias and max(bias) >= vocab:
        raise InvalidRequest(
            f"logit_bias token id {max(bias)} is past the vocabulary ({vocab} tokens)",
            param="logit_bias",
        )
    return bias


def _sampling(
    gw: Gateway, body: ChatCompletionRequest | CompletionRequest, prompt_len: int
) -> SamplingConfig:
    max_tokens, param = body.max_tokens, "max_tokens"
    if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
        if max_tokens is not None and max_tokens != body.max_completion_tokens:
            raise InvalidRequest(
                "max_tokens and max_completion_tokens disagree; send one",
                param="max_completion_tokens",
            )
        max_tokens, param = body.max_completion_tokens, "max_completion_tokens"
    room = gw.engine.max_model_len - prompt_len
    capped = isinstance(body, ChatCompletionRequest) and body._cap_to_context
    if max_tokens is not None and max_tokens > room and capped:
        max_tokens = room  # a prompt always leaves at least one token (_prompt_ids)
    if max_tokens is not None and max_tokens > room:
        raise InvalidRequest(
            f"{param} is {max_tokens}, but the prompt ({prompt_len} tokens) leaves {room} of "
            f"the model's {gw.engine.max_model_len}-token context",
            param=param,
        )
    return SamplingConfig(
        n=1,
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        presence_penalty=body.presence_penalty or 0.0,
        frequency_penalty=body.frequency_penalty or 0.0,
        logit_bias=_logit_bias(gw, body),
        min_tokens=body.min_tokens,
        seed=body.seed,
        stop=body.stop_list,
        ignore_eos=body.ignore_eos,
    )
