"""Admission: every check a client can fail, before any engine call, then the
admission slot (``admit``), and the request it admits (``Admitted``).

Order matters: the cheap refusals come first (a draining or full server does not parse
or tokenise), then the body, the strategy and its budget, the prompts and their
sampling fields, the tenant's limits, and only then the slot (or a 429). The request
was authorized before any of this, by its route's dependency (``server.routes.guard``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, replace

import structlog
from starlette.requests import Request

from core.allowance import Allowance, Limits
from core.base import JSON, Result, Strategy, StrategyContext, StrategyEvent, StrategyRequest
from core.budget import Budget
from core.engine import SamplingConfig
from core.errors import InvalidRequest, OverTenantLimit
from server import presets
from server.apis.openai import sdk_fields
from server.apis.openai.protocol import (
    VLLM_FIELDS,
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIBody,
    parse_body,
)
from server.apis.openai.render import Envelope, Kind
from server.apis.openai.validation import set_fields
from server.errors import request_id, response_headers
from server.gateway import Gateway, gateway
from server.pipeline import budgets, builders, effort
from server.pipeline.answer_fields import format_asked, logprobs_asked, tools_asked
from server.pipeline.body import read_body
from server.pipeline.request_engine import RequestEngine, Tally, with_tally
from server.pipeline.streaming import Encoder, StreamEncoder
from server.process.metrics import route_label
from server.tenancy.admission import Slot
from server.tenancy.auth import is_batch_line, tenant_of
from server.tenancy.tenants import Tenant
from strategies.forced_answer import ForcedAnswers
from strategies.reasoning import thinking_open_after
from strategies.tool_calls import CallForm

log = structlog.get_logger("thinkgate.http")


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
        (``server.pipeline.request_engine``: affinity key, redraws billed, ceiling and clock;
        ``strategies.forced_answer``: a forced answer always comes)."""
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
            # A grammar-bound sample that ends inside its thinking still answers
            # (strategies.forced_answer); outside the meter, whose ceiling and clock hold
            # its answer's call as every other.
            forced = ForcedAnswers(engine)
            run = with_tally(
                self.strategy.run(replace(ctx, engine=forced, allowance=allowance)),
                tally,
                allowance,
            )
            out.append(builders.with_echo(run, self.echoes[i]) if self.echoes else run)
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


@dataclass(frozen=True, slots=True)
class _Asked:
    """What the body asks of each prompt's run, checked against the strategy."""

    samplings: list[SamplingConfig]  # one per prompt
    echo: bool  # completions' echo
    form: CallForm | None  # how answers hold tool calls (None: they do not)


async def admit(
    request: Request, kind: Kind, parse: Callable[[bytes], OpenAIBody] | None = None
) -> tuple[Admitted, bool]:
    """Every check a client can fail, then the admission slot; ``(admitted, stream)``.
    ``parse`` reads the raw body (default: the OpenAI model of ``kind``)."""
    started = time.perf_counter()
    rid = request_id(request)
    structlog.contextvars.bind_contextvars(request_id=rid)
    gw = gateway(request)
    tenant = tenant_of(request)
    body = await _body(request, gw, tenant, kind, parse)
    name, budget = _budget(request, gw, body, tenant)
    strategy = gw.registry.get(name)
    options = _own_options(request, gw, name, body.options())
    prompts, per_prompt = _check_prompts(request, gw, body, budget, tenant)
    asked = _asked(gw, body, strategy, name, prompts)
    # The thinking budget leaves the answer room under the output limit (server.pipeline.effort).
    budget = effort.fit_output(
        budget,
        asked.samplings[0].max_tokens,
        end_tokens=len(gw.engine.tokens.think_end_ids),
        reserve=gw.settings.answer_reserve,
    )
    request.state.budget = budget
    limits = builders.limits(gw, budget, started, len(prompts))
    budgets.check_ceiling(budget, limits.answer, request.headers)
    sreqs = _strategy_requests(gw, rid, body, prompts, asked, budget, options)
    for sreq in sreqs:
        strategy.validate(sreq, gw.engine)
    await gw.engine.health()
    reserve = builders.worst_case(gw, budget, asked.samplings, prompts, per_prompt)
    slot = await gw.admission.acquire(tenant, per_prompt * len(prompts), reserve)
    allowances: list[Allowance] = []
    # Unanswered (a client gone, an error): billed what its calls committed, the tokens
    # the gateway saw generated (known where a ceiling or deadline metered the calls).
    slot.spent = lambda: sum(a.committed for a in allowances)
    include_usage, continuous_usage = _usage_asked(body)
    admitted = Admitted(
        gw=gw,
        strategy=strategy,
        name=name,
        contexts=tuple(
            StrategyContext(engine=gw.engine, request=r, resources=gw.resources) for r in sreqs
        ),
        slot=slot,
        echoes=builders.echoes(gw, body, prompts) if asked.echo else (),
        env=replace(Envelope.new(kind, rid, gw.engine.model_name, name, budget), tools=asked.form),
        headers=response_headers(request),
        route=route_label(request),
        request_id=rid,
        started=started,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        limits=limits,
        tenant=tenant.name,
        objective="batch" if is_batch_line(request) else "interactive",
        allowances=allowances,
    )
    return admitted, body.stream


def _own_options(
    request: Request, gw: Gateway, name: str, unknown: Mapping[str, JSON]
) -> dict[str, JSON]:
    """The strategy's options among the body's unknown fields. The rest, a client's or a
    platform's own fields, are accepted and ignored as vLLM's server does, and named in
    ``X-Thinkgate-Ignored`` and the log; a misspelling of one of thinkgate's names is a
    400 (``Registry.check_options``)."""
    foreign = gw.registry.check_options(name, unknown, ours=VLLM_FIELDS)
    if not foreign:
        return dict(unknown)
    log.info("request.fields_ignored", fields=list(foreign))
    request.state.ignored = (*getattr(request.state, "ignored", ()), *foreign)
    return {k: v for k, v in unknown.items() if k not in foreign}


async def _body(
    request: Request,
    gw: Gateway,
    tenant: Tenant,
    kind: Kind,
    parse: Callable[[bytes], OpenAIBody] | None,
) -> OpenAIBody:
    """The body, read and parsed, its ignored fields noted on ``request.state``."""
    raw = await read_body(request, gw.settings.max_body_bytes, tenant=tenant)
    # Cheap refusals first: a draining (503 with Retry-After) or full server does not parse
    # or tokenise (a drain that starts later still waits for, or aborts, what it admits).
    # The body is read all the same: a connection whose body was left unread is closed
    # after the answer, and a client reusing it can meet the close (transport errors).
    gw.lifecycle.check_admission()
    gw.admission.check_room(tenant)
    if parse is not None:
        return parse(raw)  # a translation notes its own route's ignored fields
    body: OpenAIBody
    if kind == "chat":
        body = parse_body(ChatCompletionRequest, raw)
    else:
        body = parse_body(CompletionRequest, raw)
    table = sdk_fields.CHAT if kind == "chat" else sdk_fields.COMPLETIONS
    sdk_fields.refuse_decided(table, body.model_extra or {})
    request.state.ignored = sdk_fields.ignored(table, set_fields(body))
    if isinstance(body, ChatCompletionRequest):
        request.state.ignored += builders.ignored_in_messages(body)
    return body


def _budget(request: Request, gw: Gateway, body: OpenAIBody, tenant: Tenant) -> tuple[str, Budget]:
    """The strategy and its budget (a preset's, the headers', the body's), noted on
    ``request.state`` for the response headers and the logs."""
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
        gw.settings,
        honoured=honoured,
        context=gw.effort_context or gw.engine.max_model_len,
        tenant=tenant,
    )
    request.state.budget = budget
    request.state.strategy = name
    return name, budget


def _check_prompts(
    request: Request, gw: Gateway, body: OpenAIBody, budget: Budget, tenant: Tenant
) -> tuple[list[tuple[int, ...]], int]:
    """The prompts' ids and the samples each draws, held to the server's and the
    tenant's caps on choices, prompts and samples in flight."""
    settings = gw.settings
    if body.n > settings.max_n:
        raise InvalidRequest(f"n is {body.n}; this server's cap is {settings.max_n}", param="n")
    prompts = builders.prompts_of(gw, body)
    if len(prompts) > 1 and body.stream:
        raise InvalidRequest(
            "stream with a list of prompts is not supported; stream one prompt per request "
            "or send the list without stream",
            param="stream",
        )
    per_prompt = max(body.n, budget.samples or 1)
    _check_tenant_request(tenant, body, prompts, per_prompt, request.headers)
    cap = settings.max_inflight_samples
    if per_prompt * len(prompts) > cap:
        raise InvalidRequest(
            f"{len(prompts)} prompts x {per_prompt} samples exceed this server's "
            f"{cap} samples in flight; send fewer prompts at once",
            param="prompt",
        )
    return prompts, per_prompt


def _asked(
    gw: Gateway, body: OpenAIBody, strategy: Strategy, name: str, prompts: list[tuple[int, ...]]
) -> _Asked:
    """The answer fields the body asks for (logprobs, format, tools: ``answer_fields``)
    and each prompt's sampling parameters carrying them."""
    client_k, echo = logprobs_asked(body, strategy, name)
    structured = format_asked(gw, body, strategy, name)
    form, forced = tools_asked(gw, body, strategy, name, structured)
    structured = forced or structured  # with tools, the grammar holds the format too
    samplings = [
        replace(
            builders.sampling(gw, body, len(prompt_ids)),
            token_logprobs=client_k,
            prompt_logprobs=client_k if echo else None,
            structured=structured,
        )
        for prompt_ids in prompts
    ]
    return _Asked(samplings=samplings, echo=echo, form=form)


def _usage_asked(body: OpenAIBody) -> tuple[bool, bool]:
    """(usage on the stream's last chunk, usage on every chunk): ``stream_options``."""
    asked = body.stream_options
    if asked is None or not asked.include_usage:
        return False, False
    # As vLLM: continuous usage only together with include_usage.
    return True, bool(asked.continuous_usage_stats)


def _strategy_requests(
    gw: Gateway,
    rid: str,
    body: OpenAIBody,
    prompts: list[tuple[int, ...]],
    asked: _Asked,
    budget: Budget,
    options: Mapping[str, JSON],
) -> list[StrategyRequest]:
    """What the strategy runs, one request per prompt."""
    return [
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
            tools=asked.form is not None and asked.form.kind == "tags",
        )
        for prompt_ids, sampling in zip(prompts, asked.samplings, strict=True)
    ]


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
