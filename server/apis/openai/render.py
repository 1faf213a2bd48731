"""OpenAI response bodies and stream chunks, as plain dicts (orjson encodes them).

Chat: ``message.reasoning_content`` and ``message.reasoning`` (the same text; vLLM's
newer name) hold the thinking, ``message.content`` the answer. Completions: ``text`` is
the answer and ``reasoning_content``/``reasoning`` sit beside it on the choice.
Every non-streamed response carries a top-level ``thinkgate`` object; a stream carries
it on its last chunk that has a ``finish_reason``.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from core.base import JSON, Choice, LogprobEntry, Result, Usage
from core.budget import Budget
from strategies.tool_calls import CallForm, read_calls

Kind = Literal["chat", "completion"]
Body = dict[str, object]


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """What every body and chunk of one response shares."""

    kind: Kind
    response_id: str
    model: str
    created: int
    strategy: str
    budget: Budget
    tools: CallForm | None = None  # how chat answers hold tool calls (None: they do not)
    # The request's max_tokens was cut to the room its prompt left (the Messages API's
    # rule): an answer cut there ended at the context, not at the client's limit.
    capped_by_context: bool = False

    @classmethod
    def new(
        cls, kind: Kind, request_id: str, model: str, strategy: str, budget: Budget
    ) -> Envelope:
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        return cls(
            kind=kind,
            response_id=f"{prefix}-{request_id}",
            model=model,
            created=int(time.time()),
            strategy=strategy,
            budget=budget,
        )

    def thinkgate(self, final: Result) -> dict[str, object]:
        """The extension object: strategy, samples drawn, budget applied, Result.info."""
        info: dict[str, object] = {
            "strategy": self.strategy,
            "samples": final.samples,
            "budget": self.budget.as_dict(),
        }
        info.update(final.info)
        return info


def usage_body(usage: Usage) -> Body:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def response_body(env: Envelope, final: Result) -> Body:
    """The whole non-streamed response."""
    choices = [
        _choice(env.kind, c, tools=env.tools) for c in sorted(final.choices, key=lambda c: c.index)
    ]
    return {
        "id": env.response_id,
        "object": "chat.completion" if env.kind == "chat" else "text_completion",
        "created": env.created,
        "model": env.model,
        "choices": choices,
        "usage": usage_body(final.usage),
        "thinkgate": env.thinkgate(final),
    }


LOGPROB_FLOOR = -9999.0  # -inf is no JSON number (vLLM's server floors it the same way)


def _logprob(value: float | None) -> float:
    if value is None:  # only a prompt's first token has none, and chat has no prompt's
        raise ValueError("a generated token without a logprob")
    return LOGPROB_FLOOR if math.isnan(value) else max(value, LOGPROB_FLOOR)


def chat_logprobs(entries: Sequence[LogprobEntry]) -> Body:
    """Chat's ``logprobs`` object: ``content``, one entry per token (text, logprob, UTF-8
    bytes, the most likely alternatives)."""

    def one(token: str, logprob: float | None) -> Body:
        return {"token": token, "logprob": _logprob(logprob), "bytes": list(token.encode())}

    return {
        "content": [
            {**one(e.token, e.logprob), "top_logprobs": [one(t, v) for t, v in e.top]}
            for e in entries
        ],
        "refusal": None,
    }


def completion_logprobs(entries: Sequence[LogprobEntry], *, offset: int = 0) -> tuple[Body, int]:
    """Legacy completions' ``logprobs`` object (parallel lists: ``tokens``,
    ``token_logprobs``, ``top_logprobs`` as token -> logprob, ``text_offset`` counted from
    ``offset``) and the offset after the last token. An echoed prompt's first token has
    null logprobs, as in OpenAI's and vLLM's answers."""
    tokens: list[str] = []
    values: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    for e in entries:
        offsets.append(offset)
        tokens.append(e.token)
        offset += len(e.token)
        if e.logprob is None:
            values.append(None)
            tops.append(None)
            continue
        values.append(_logprob(e.logprob))
        tops.append({t: _logprob(v) for t, v in e.top} or None)
    body: Body = {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    }
    return body, offset


def _choice_logprobs(kind: Kind, c: Choice) -> Body | None:
    if c.logprobs is None:
        return None
    if kind == "chat":
        return chat_logprobs(c.logprobs)
    prompt: Sequence[LogprobEntry] = c.prompt_logprobs or ()
    body, _ = completion_logprobs([*prompt, *c.logprobs])
    return body


@dataclass(frozen=True, slots=True)
class Called:
    """A chat answer read for tool calls: its text without them, the calls as OpenAI
    writes them, and the finish reason (``tool_calls`` when the model stopped after
    calling)."""

    content: str | None
    calls: list[Body]
    finish_reason: str


def call_id() -> str:
    """A new tool call's id, which the client gives back with the tool's result."""
    return f"call_{uuid.uuid4().hex[:24]}"


def call_pieces(calls: Sequence[Body]) -> list[Body]:
    """A stream's pieces of ``calls``, as OpenAI streams them: per call, its index, id,
    type and name with empty arguments, then its arguments (the SDKs join the pieces of
    one index)."""
    pieces: list[Body] = []
    for i, call in enumerate(calls):
        fn = call["function"]
        assert isinstance(fn, dict)  # built by called()
        head = {"index": i, "id": call["id"], "type": "function"}
        pieces.append({**head, "function": {"name": fn["name"], "arguments": ""}})
        pieces.append({"index": i, "function": {"arguments": fn["arguments"]}})
    return pieces


def called(c: Choice, form: CallForm) -> Called:
    parsed = read_calls(c.content, form)
    if not parsed.calls:
        return Called(c.content, [], c.finish_reason)
    calls: list[Body] = [
        {
            "id": call_id(),
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in parsed.calls
    ]
    # A function the request named ends as "stop" (OpenAI's way); a call the model
    # chose, or one of those required, as "tool_calls".
    called_one = "stop" if form.kind == "named" else "tool_calls"
    finish = called_one if c.finish_reason == "stop" else c.finish_reason
    return Called(parsed.content or None, calls, finish)


def _choice(kind: Kind, c: Choice, *, tools: CallForm | None = None) -> Body:
    reasoning = c.reasoning or None
    body: Body
    if kind == "chat":
        answer = called(c, tools) if tools else Called(c.content, [], c.finish_reason)
        message: Body = {
            "role": "assistant",
            "content": answer.content,
            "refusal": None,  # the schema requires it; the served model refuses in text
            "reasoning_content": reasoning,
            "reasoning": reasoning,
        }
        if answer.calls:
            message["tool_calls"] = answer.calls
        body = {
            "index": c.index,
            "message": message,
            "finish_reason": answer.finish_reason,
            "logprobs": _choice_logprobs(kind, c),
        }
    else:
        body = {
            "index": c.index,
            "text": (c.echo or "") + c.content,
            "reasoning_content": reasoning,
            "reasoning": reasoning,
            "finish_reason": c.finish_reason,
            "logprobs": _choice_logprobs(kind, c),
        }
    if c.info or c.budget_cut is not None:
        info = dict(c.info)
        if c.budget_cut is not None:
            info["budget_cut"] = list(c.budget_cut)
        body["thinkgate"] = info
    return body


def choice_info(c: Choice) -> Body:
    """One answer's details where another API has no choice object: its index, finish
    reason, budget cuts and what the strategy reports for it."""
    info: Body = {"index": c.index, "finish_reason": c.finish_reason, **c.info}
    if c.budget_cut is not None:
        info["budget_cut"] = list(c.budget_cut)
    return info


def chunk(env: Envelope, choices: list[Body], **extra: object) -> Body:
    """One stream chunk around ``choices`` (built with the delta helpers below)."""
    body: Body = {
        "id": env.response_id,
        "object": "chat.completion.chunk" if env.kind == "chat" else "text_completion",
        "created": env.created,
        "model": env.model,
        "choices": choices,
    }
    body.update(extra)
    return body


def delta_choice(
    kind: Kind,
    index: int,
    *,
    role: bool = False,
    reasoning: str = "",
    content: str = "",
    finish_reason: str | None = None,
    info: Mapping[str, JSON] | None = None,
    logprobs: Body | None = None,
    tool_calls: Sequence[Body] = (),
) -> Body:
    """A choice of a stream chunk: reasoning, content, tool calls or the finish (never
    mixed up); ``logprobs`` (already rendered) those of the tokens it carries."""
    body: Body
    if kind == "chat":
        delta: Body = {}
        if role:
            delta["role"] = "assistant"
            delta["content"] = ""
        if reasoning:
            delta["reasoning_content"] = reasoning
            delta["reasoning"] = reasoning
        if content:
            delta["content"] = content
        if tool_calls:  # each a piece (index, then id and name, or arguments), as OpenAI's
            delta["tool_calls"] = list(tool_calls)
        body = {
            "index": index,
            "delta": delta,
            "finish_reason": finish_reason,
            "logprobs": logprobs,
        }
    else:
        body = {
            "index": index,
            "text": content,
            "finish_reason": finish_reason,
            "logprobs": logprobs,
        }
        if reasoning:
            body["reasoning_content"] = reasoning
            body["reasoning"] = reasoning
    if info:
        body["thinkgate"] = dict(info)
    return body
