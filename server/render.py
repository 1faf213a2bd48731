"""OpenAI response bodies and stream chunks, as plain dicts (orjson encodes them).

Chat: ``message.reasoning_content`` and ``message.reasoning`` (the same text; vLLM's
newer name) hold the thinking, ``message.content`` the answer. Completions: ``text`` is
the answer and ``reasoning_content``/``reasoning`` sit beside it on the choice.
Every non-streamed response carries a top-level ``thinkgate`` object; a stream carries
it on its last chunk that has a ``finish_reason``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from core.base import JSON, Choice, Result, Usage
from core.budget import Budget

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
    choices = [_choice(env.kind, c) for c in sorted(final.choices, key=lambda c: c.index)]
    return {
        "id": env.response_id,
        "object": "chat.completion" if env.kind == "chat" else "text_completion",
        "created": env.created,
        "model": env.model,
        "choices": choices,
        "usage": usage_body(final.usage),
        "thinkgate": env.thinkgate(final),
    }


def _choice(kind: Kind, c: Choice) -> Body:
    reasoning = c.reasoning or None
    body: Body
    if kind == "chat":
        body = {
            "index": c.index,
            "message": {
                "role": "assistant",
                "content": c.content,
                "reasoning_content": reasoning,
                "reasoning": reasoning,
            },
            "finish_reason": c.finish_reason,
            "logprobs": None,
        }
    else:
        body = {
            "index": c.index,
            "text": c.content,
            "reasoning_content": reasoning,
            "reasoning": reasoning,
            "finish_reason": c.finish_reason,
            "logprobs": None,
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
) -> Body:
    """A choice of a stream chunk: reasoning, content, or the finish (never mixed up)."""
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
        body = {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
    else:
        body = {"index": index, "text": content, "finish_reason": finish_reason, "logprobs": None}
        if reasoning:
            body["reasoning_content"] = reasoning
            body["reasoning"] = reasoning
    if info:
        body["thinkgate"] = dict(info)
    return body
