"""From a checked body to what the strategy runs on: the prompts' token ids (the chat
template, or each completions prompt), completions' ``echo`` texts, the sampling
parameters of each prompt, the fields a body set that change nothing, and the request's
limits (its ceiling and deadline) and worst-case spend. Each refusal is a 400 naming
the field."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace

from core.allowance import Limits
from core.base import Result, StrategyEvent
from core.budget import Budget
from core.engine import SamplingConfig
from core.errors import InvalidRequest
from server.apis.openai import sdk_fields
from server.apis.openai.protocol import ChatCompletionRequest, CompletionRequest, OpenAIBody
from server.gateway import Gateway


def ignored_in_messages(body: ChatCompletionRequest) -> tuple[str, ...]:
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


def prompts_of(
    gw: Gateway, body: ChatCompletionRequest | CompletionRequest
) -> list[tuple[int, ...]]:
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


def echoes(gw: Gateway, body: OpenAIBody, prompts: list[tuple[int, ...]]) -> tuple[str, ...]:
    """Each prompt's text as completions' ``echo`` returns it: as sent, or decoded ids."""
    sent = body.prompts if isinstance(body, CompletionRequest) else []
    return tuple(
        p if isinstance(p, str) else gw.engine.tokens.decode(ids)
        for p, ids in zip(sent, prompts, strict=True)
    )


async def with_echo(
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


def sampling(
    gw: Gateway, body: ChatCompletionRequest | CompletionRequest, prompt_len: int
) -> SamplingConfig:
    """The sampling parameters of one prompt; ``max_tokens`` (or chat's
    ``max_completion_tokens``) must fit the context the prompt leaves."""
    max_tokens, param = body.max_tokens, "max_tokens"
    if isinstance(body, ChatCompletionRequest) and body.max_completion_tokens is not None:
        if max_tokens is not None and max_tokens != body.max_completion_tokens:
            raise InvalidRequest(
                "max_tokens and max_completion_tokens disagree; send one",
                param="max_completion_tokens",
            )
        max_tokens, param = body.max_completion_tokens, "max_completion_tokens"
    room = gw.engine.max_model_len - prompt_len
    if max_tokens is None and gw.default_max_tokens is not None:
        return _sampling(gw, body, min(gw.default_max_tokens, room))
    capped = isinstance(body, ChatCompletionRequest) and body._cap_to_context
    if max_tokens is not None and max_tokens > room and capped:
        max_tokens = room  # a prompt always leaves at least one token (_prompt_ids)
    if max_tokens is not None and max_tokens > room:
        raise InvalidRequest(
            f"{param} is {max_tokens}, but the prompt ({prompt_len} tokens) leaves {room} of "
            f"the model's {gw.engine.max_model_len}-token context",
            param=param,
        )
    return _sampling(gw, body, max_tokens)


def _sampling(
    gw: Gateway, body: ChatCompletionRequest | CompletionRequest, max_tokens: int | None
) -> SamplingConfig:
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


def worst_case(
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


def limits(gw: Gateway, budget: Budget, started: float, prompts: int) -> Limits:
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
