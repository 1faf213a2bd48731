"""Anthropic Messages API bodies and stream events (``POST /v1/messages``), as dicts.

``content`` is, per choice, a ``thinking`` block (the thinking text; ``signature`` is
empty: nothing here signs) when the choice thought, then a ``text`` block (the answer;
left out when the answer is only tool calls), then a ``tool_use`` block per call when
``tools`` were offered. ``stop_reason``: ``end_turn``, ``tool_use`` (the answer called),
``stop_sequence`` (with ``stop_sequence`` set to the one that matched) or ``max_tokens``
(a choice was cut). Usage: ``input_tokens`` and
``output_tokens`` (thinking included; ``output_tokens_details.thinking_tokens`` says how
many), exact over every sample the strategy drew. The ``thinkgate`` extension sits on
the message (a stream: on ``message_delta``); each answer's own details (finish reason,
budget cuts, strategy options' output such as ``token_ids``) on its ``text`` block (a
stream: on that block's ``content_block_stop``).

A stream sends Anthropic's events, each as ``event: <type>``: ``message_start``, then per
block ``content_block_start``, ``content_block_delta`` (``thinking_delta`` or
``text_delta``; a call: ``input_json_delta``) and ``content_block_stop``, then
``message_delta`` (stop reason, usage) and ``message_stop``. A failure after the first
byte is one ``error`` event in Anthropic's envelope. Progress of multi-sample strategies
and keep-alives are SSE comments, which SDKs skip.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from core.base import Choice, ChoiceDelta, Progress, Result, StrategyEvent, Usage
from core.errors import GatewayError
from server.apis.blocks import BlockKind, Blocks, Closed, Opened, Text, answer_of, of_result
from server.apis.messages import errors as messages_errors
from server.apis.openai import sse
from server.apis.openai.protocol import ChatCompletionRequest
from server.apis.openai.render import Body, Envelope, choice_info
from server.apis.reasoning_seal import Seal
from strategies.tool_calls import ToolCall


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagesCall:
    """One /v1/messages request as the pipeline runs it (``serving.Translation``)."""

    chat: ChatCompletionRequest
    renames: Mapping[str, str]  # chat field -> this route's, for errors found later
    ignored: tuple[str, ...] = ()  # the platform fields set that change nothing here
    seal: Seal | None = None  # signs thinking blocks (None: an empty signature)
    omit_thinking: bool = False  # thinking.display omitted: blocks without their text
    id_prefix: str = "msg_"

    def body(self, env: Envelope, final: Result) -> Body:
        content = [
            _tool_use(b.call, _use_id())
            if b.call is not None
            else _block(b.kind, b.text, b.choice, self)
            for b in of_result(final, env.tools)
        ]
        reason, sequence = stop_reason(final, env)
        return {
            "id": env.response_id,
            "type": "message",
            "role": "assistant",
            "model": env.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "stop_details": None,  # a refusal's details: the served model refuses in text
            "container": None,  # no container tools run here
            "usage": usage_body(final.usage),
            "thinkgate": env.thinkgate(final),
        }

    def encoder(self, env: Envelope, prompt_tokens: int) -> MessagesEncoder:
        return MessagesEncoder(env, prompt_tokens, self)

    def signature(self, thinking: str) -> str:
        """A thinking block's signature: its thinking, sealed (server.apis.reasoning_seal)."""
        return "" if self.seal is None else self.seal.seal(thinking, "messages.thinking")


def usage_body(usage: Usage | None = None, *, prompt_tokens: int = 0) -> Body:
    """The Messages API's ``usage``, every field its schema has (nothing is cached or
    written to a cache here, no server tool runs, one service tier)."""
    return {
        "input_tokens": usage.prompt_tokens if usage is not None else prompt_tokens,
        "output_tokens": usage.completion_tokens if usage is not None else 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "server_tool_use": None,
        "service_tier": "standard",
        "inference_geo": None,
        "output_tokens_details": {
            "thinking_tokens": usage.reasoning_tokens if usage is not None else 0
        },
    }


def stop_reason(final: Result, env: Envelope) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``) of a result: ``max_tokens`` if any choice was
    cut (``model_context_window_exceeded`` where the limit was the context's room, below
    the client's ``max_tokens``), ``tool_use`` if the first one called, else its way of
    ending."""
    form = env.tools
    choices = sorted(final.choices, key=lambda c: c.index)
    if any(c.finish_reason != "stop" for c in choices):
        return ("model_context_window_exceeded" if env.capped_by_context else "max_tokens"), None
    if choices and answer_of(choices[0], form)[1]:
        return "tool_use", None
    if choices and choices[0].stop_sequence is not None:
        return "stop_sequence", choices[0].stop_sequence
    return "end_turn", None


def _block(
    kind: BlockKind, text: str, choice: Choice | None = None, call: MessagesCall | None = None
) -> Body:
    """A content block; an answer's carries its choice's ``thinkgate`` details; a whole
    thinking block its signature (and no text when the request omits it)."""
    if kind == "thinking":
        if call is None:  # a stream's block start: the text and signature follow
            return {"type": "thinking", "thinking": "", "signature": ""}
        shown = "" if call.omit_thinking else text
        return {"type": "thinking", "thinking": shown, "signature": call.signature(text)}
    block: Body = {"type": "text", "text": text, "citations": None}
    if choice is not None:
        block["thinkgate"] = choice_info(choice)
    return block


def _use_id() -> str:
    """A new call's id, which the client gives back with the tool's result."""
    return f"toolu_{uuid.uuid4().hex[:24]}"


def _tool_use(call: ToolCall, use_id: str, *, done: bool = True) -> Body:
    """A ``tool_use`` block; its ``input`` empty at a stream's block start."""
    return {
        "type": "tool_use",
        "id": use_id,
        "name": call.name,
        "input": json.loads(call.arguments) if done else {},
    }


class MessagesEncoder:
    """Strategy events -> Anthropic stream events (``streaming.Encoder``)."""

    def __init__(self, env: Envelope, prompt_tokens: int, call: MessagesCall) -> None:
        self._env = env
        self._call = call
        self._prompt_tokens = prompt_tokens
        self._started = False
        self._blocks = Blocks(env.tools)
        self._use_ids: dict[int, str] = {}  # call block position -> its tool_use id

    def _opening(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        message: Body = {
            "id": self._env.response_id,
            "type": "message",
            "role": "assistant",
            "model": self._env.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "stop_details": None,
            "container": None,
            "usage": usage_body(prompt_tokens=self._prompt_tokens),
        }
        return [sse.event("message_start", {"type": "message_start", "message": message})]

    def encode(self, event: StrategyEvent) -> list[bytes]:
        frames = self._opening()
        if isinstance(event, Progress):
            frames.append(sse.comment(sse.PROGRESS, event.data))
        elif isinstance(event, ChoiceDelta):
            frames += [self._frame(b) for b in self._blocks.delta(event)]
        else:
            frames += [self._frame(b) for b in self._blocks.final(event)]
            reason, sequence = stop_reason(event, self._env)
            delta = {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": usage_body(event.usage),
                "thinkgate": self._env.thinkgate(event),
            }
            frames.append(sse.event("message_delta", delta))
            frames.append(sse.event("message_stop", {"type": "message_stop"}))
        return frames

    def _frame(self, b: Opened | Text | Closed) -> bytes:
        if isinstance(b, Opened):
            start = {"type": "content_block_start", "index": b.position}
            if b.call is not None:
                use_id = self._use_ids.setdefault(b.position, _use_id())
                block = _tool_use(b.call, use_id, done=False)
            else:
                block = _block(b.kind, "")
            return sse.event("content_block_start", {**start, "content_block": block})
        if isinstance(b, Text):
            if b.kind == "call":
                delta: Body = {"type": "input_json_delta", "partial_json": b.text}
            elif b.kind == "thinking":
                if self._call.omit_thinking:
                    return b""  # billed, not shown: the signature carries it
                delta = {"type": "thinking_delta", "thinking": b.text}
            else:
                delta = {"type": "text_delta", "text": b.text}
            body = {"type": "content_block_delta", "index": b.position, "delta": delta}
            return sse.event("content_block_delta", body)
        stop: Body = {"type": "content_block_stop", "index": b.position}
        if b.kind == "thinking":  # Anthropic's signature_delta, just before the stop
            delta = {"type": "signature_delta", "signature": self._call.signature(b.text)}
            signed = {"type": "content_block_delta", "index": b.position, "delta": delta}
            return sse.event("content_block_delta", signed) + sse.event("content_block_stop", stop)
        if b.kind == "answer" and b.choice is not None:
            stop["thinkgate"] = choice_info(b.choice)
        return sse.event("content_block_stop", stop)

    def error(self, err: GatewayError) -> bytes:
        rid = self._env.response_id.removeprefix("msg_")
        return sse.event("error", messages_errors.envelope(err, rid))

    def end(self) -> bytes:
        return b""
