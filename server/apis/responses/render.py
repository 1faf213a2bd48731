"""OpenAI Responses API bodies and stream events (``POST /v1/responses``), as plain dicts.

A response's ``output`` is, per choice, a ``reasoning`` item (the thinking text as one
``reasoning_text`` content part; no summary) when the choice thought, then a ``message``
item with one ``output_text`` part (the answer; left out when the answer is only tool
calls), then a ``function_call`` item per call the answer made when ``tools`` were
offered (``call_id``, ``name``, ``arguments`` as JSON text). ``status`` is ``incomplete`` (reason
``max_output_tokens``) when a choice was cut. Usage: ``input_tokens``, ``output_tokens``
(thinking included) and ``output_tokens_details.reasoning_tokens``, exact over every
sample the strategy drew. The ``thinkgate`` extension sits on the response object.

A stream sends the typed events the OpenAI SDK parses, each ``event: <type>`` with its
``sequence_number``: ``response.created``, ``response.in_progress``, then per item
``response.output_item.added``, ``response.content_part.added``, the text deltas
(``response.reasoning_text.delta`` or ``response.output_text.delta``), their ``.done``,
``response.content_part.done`` and ``response.output_item.done`` (a call:
``response.output_item.added``, ``response.function_call_arguments.delta`` and ``.done``,
``response.output_item.done``; calls and the answer's text come once the answer ended,
since text may turn out to be a call); last
``response.completed`` (or ``response.incomplete``) with the whole response. A failure
after the first byte is one ``error`` event. Progress of multi-sample strategies and
keep-alives are SSE comments, which SDKs skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from core.base import Choice, ChoiceDelta, Progress, Result, StrategyEvent, Usage
from core.errors import GatewayError
from server.apis.blocks import BlockKind, Blocks, Closed, Opened, Text, of_result
from server.apis.openai import sse
from server.apis.openai.protocol import ChatCompletionRequest
from server.apis.openai.render import Body, Envelope, call_id, choice_info
from server.apis.reasoning_seal import Seal
from strategies.tool_calls import ToolCall


@dataclass(frozen=True, slots=True, kw_only=True)
class Echo:
    """The request fields a response repeats."""

    instructions: str | None
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    effort: str | None
    metadata: dict[str, str]
    text_format: dict[str, object] = field(default_factory=lambda: {"type": "text"})
    tools: Sequence[Mapping[str, object]] = ()  # as the request gave them
    tool_choice: object = "none"
    parallel_tool_calls: bool = True
    store: bool = False
    previous_response_id: str | None = None
    max_tool_calls: int | None = None
    # reasoning.summary as asked: the reasoning text is then its summary too, where the
    # AI SDK and other Responses clients read reasoning (None: summary stays empty).
    summary: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponsesCall:
    """One /v1/responses request as the pipeline runs it (``serving.Translation``)."""

    chat: ChatCompletionRequest
    echo: Echo
    renames: Mapping[str, str]  # chat field -> this route's, for errors found later
    ignored: tuple[str, ...] = ()  # the platform fields set that change nothing here
    # Seals each reasoning item's text into its encrypted_content (the request's include
    # asked for it); None: encrypted_content is null.
    seal: Seal | None = None
    # Keeps the finished response (server.apis.responses.store); None: not stored.
    keep: Callable[[Body], None] | None = None
    id_prefix: str = "resp_"

    def body(self, env: Envelope, final: Result) -> Body:
        items = [
            _call_item(env, b.position, b.call, call_id(), done=True)
            if b.call is not None
            else _item(
                env,
                b.kind,
                b.position,
                text=b.text,
                choice=b.choice,
                done=True,
                seal=self.seal,
                summary=self.echo.summary is not None,
            )
            for b in of_result(final, env.tools)
        ]
        body = _response(env, self.echo, final=final, output=items)
        if self.keep is not None:
            self.keep(body)
        return body

    def encoder(self, env: Envelope, prompt_tokens: int) -> ResponsesEncoder:
        return ResponsesEncoder(env, self.echo, self.seal, self.keep)


def usage_body(usage: Usage) -> Body:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


def _status(final: Result) -> str:
    cut = any(c.finish_reason != "stop" for c in final.choices)
    return "incomplete" if cut else "completed"


def _response(env: Envelope, echo: Echo, *, final: Result | None, output: list[Body]) -> Body:
    status = _status(final) if final is not None else "in_progress"
    body: Body = {
        "id": env.response_id,
        "object": "response",
        "created_at": env.created,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "model": env.model,
        "output": output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "previous_response_id": echo.previous_response_id,
        "reasoning": {"effort": echo.effort, "summary": echo.summary},
        "store": echo.store,
        "background": False,
        # The values sampled with: the request's, else the engine's defaults.
        "temperature": 1.0 if echo.temperature is None else echo.temperature,
        "top_p": 1.0 if echo.top_p is None else echo.top_p,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "max_tool_calls": echo.max_tool_calls,
        "safety_identifier": echo.safety_identifier,
        "prompt_cache_key": echo.prompt_cache_key,
        "service_tier": "default",
        "text": {"format": echo.text_format},
        "tool_choice": echo.tool_choice,
        # A function tool's ``description`` and ``strict`` as given (null: not said; the
        # schemas require both).
        "tools": [_tool(t) for t in echo.tools],
        "truncation": "disabled",
        "usage": usage_body(final.usage) if final is not None else None,
        "user": None,
        "metadata": echo.metadata,
    }
    if final is not None:
        body["thinkgate"] = env.thinkgate(final)
    return body


def _tool(tool: Mapping[str, object]) -> Body:
    out = dict(tool)
    if out.get("type") == "function":
        out.setdefault("description", None)
        out.setdefault("strict", None)
    return out


def _item_id(env: Envelope, kind: BlockKind, position: int) -> str:
    prefix = {"thinking": "rs", "answer": "msg", "call": "fc"}[kind]
    return f"{prefix}_{env.response_id.removeprefix('resp_')}_{position}"


def _call_item(env: Envelope, position: int, call: ToolCall, cid: str, *, done: bool) -> Body:
    """A ``function_call`` item; in progress (no arguments yet) unless ``done``."""
    return {
        "id": _item_id(env, "call", position),
        "type": "function_call",
        "call_id": cid,
        "name": call.name,
        "arguments": call.arguments if done else "",
        "status": "completed" if done else "in_progress",
    }


def _part(kind: BlockKind, text: str) -> Body:
    if kind == "thinking":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _item(
    env: Envelope,
    kind: BlockKind,
    position: int,
    *,
    text: str = "",
    choice: Choice | None = None,
    done: bool,
    seal: Seal | None = None,
    summary: bool = False,
) -> Body:
    """A reasoning or message item; in progress (empty) unless ``done``; a done
    reasoning item's text sealed into ``encrypted_content`` with ``seal``."""
    item_id = _item_id(env, kind, position)
    status = "in_progress"
    if done:
        cut = choice is not None and choice.finish_reason != "stop"
        status = "incomplete" if cut else "completed"
    content = [_part(kind, text)] if done else []
    if kind == "thinking":
        reasoning: Body = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": text}] if summary and done else [],
            "content": content,
            "status": status,
        }
        # Present only when sealed: OpenAI's schema has it optional and nullable, Open
        # Responses' a string.
        if seal is not None and done:
            reasoning["encrypted_content"] = seal.seal(text, "responses.reasoning")
        return reasoning
    item: Body = {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }
    if done and choice is not None:
        item["thinkgate"] = choice_info(choice)
    return item


class ResponsesEncoder:
    """Strategy events -> Responses stream events (``streaming.Encoder``)."""

    def __init__(
        self,
        env: Envelope,
        echo: Echo,
        seal: Seal | None = None,
        keep: Callable[[Body], None] | None = None,
    ) -> None:
        self._env = env
        self._echo = echo
        self._seal = seal
        self._keep = keep
        self._seq = 0
        self._blocks = Blocks(env.tools)
        self._done: list[Body] = []  # finished items, in order
        self._call_ids: dict[int, str] = {}  # call block position -> its call_id

    def _event(self, kind: str, **fields: object) -> bytes:
        body = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return sse.event(kind, body)

    def _opening(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress``, before the first event."""
        if self._seq:
            return []
        opening = _response(self._env, self._echo, final=None, output=[])
        return [
            self._event("response.created", response=opening),
            self._event("response.in_progress", response=opening),
        ]

    def encode(self, event: StrategyEvent) -> list[bytes]:
        frames = self._opening()
        if isinstance(event, Progress):
            frames.append(sse.comment(sse.PROGRESS, event.data))
        elif isinstance(event, ChoiceDelta):
            frames += [self._block(b) for b in self._blocks.delta(event)]
        else:
            frames += [self._block(b) for b in self._blocks.final(event)]
            final = _response(self._env, self._echo, final=event, output=self._done)
            if self._keep is not None:
                self._keep(final)
            kind = "response.completed" if final["status"] == "completed" else "response.incomplete"
            frames.append(self._event(kind, response=final))
        return frames

    def _block(self, b: Opened | Text | Closed) -> bytes:
        if b.kind == "call":
            return self._call(b)
        item_id = _item_id(self._env, b.kind, b.position)
        at = {"item_id": item_id, "output_index": b.position, "content_index": 0}
        summary = b.kind == "thinking" and self._echo.summary is not None
        if isinstance(b, Opened):
            item = _item(self._env, b.kind, b.position, done=False)
            added = self._event("response.output_item.added", output_index=b.position, item=item)
            added += self._event("response.content_part.added", **at, part=_part(b.kind, ""))
            return added + (self._summary(b) if summary else b"")
        if isinstance(b, Text):
            if b.kind == "thinking":
                delta = self._event("response.reasoning_text.delta", **at, delta=b.text)
                return delta + (self._summary(b) if summary else b"")
            return self._event("response.output_text.delta", **at, delta=b.text, logprobs=[])
        item = _item(
            self._env,
            b.kind,
            b.position,
            text=b.text,
            choice=b.choice,
            done=True,
            seal=self._seal,
            summary=summary,
        )
        self._done.append(item)
        if b.kind == "thinking":
            text_done = self._event("response.reasoning_text.done", **at, text=b.text)
        else:
            text_done = self._event("response.output_text.done", **at, text=b.text, logprobs=[])
        part_done = self._event("response.content_part.done", **at, part=_part(b.kind, b.text))
        part_done += self._summary(b) if summary else b""
        item_done = self._event("response.output_item.done", output_index=b.position, item=item)
        return text_done + part_done + item_done

    def _summary(self, b: Opened | Text | Closed) -> bytes:
        """The reasoning's summary events (the reasoning text itself), when asked for."""
        at = {
            "item_id": _item_id(self._env, b.kind, b.position),
            "output_index": b.position,
            "summary_index": 0,
        }
        if isinstance(b, Opened):
            part = {"type": "summary_text", "text": ""}
            return self._event("response.reasoning_summary_part.added", **at, part=part)
        if isinstance(b, Text):
            return self._event("response.reasoning_summary_text.delta", **at, delta=b.text)
        part = {"type": "summary_text", "text": b.text}
        done = self._event("response.reasoning_summary_text.done", **at, text=b.text)
        return done + self._event("response.reasoning_summary_part.done", **at, part=part)

    def _call(self, b: Opened | Text | Closed) -> bytes:
        at = {"item_id": _item_id(self._env, "call", b.position), "output_index": b.position}
        if isinstance(b, Opened):
            assert b.call is not None
            cid = self._call_ids.setdefault(b.position, call_id())
            item = _call_item(self._env, b.position, b.call, cid, done=False)
            return self._event("response.output_item.added", output_index=b.position, item=item)
        if isinstance(b, Text):
            return self._event("response.function_call_arguments.delta", **at, delta=b.text)
        assert b.call is not None
        item = _call_item(self._env, b.position, b.call, self._call_ids[b.position], done=True)
        self._done.append(item)
        args_done = self._event(
            "response.function_call_arguments.done", **at, name=b.call.name, arguments=b.text
        )
        item_done = self._event("response.output_item.done", output_index=b.position, item=item)
        return args_done + item_done

    def error(self, err: GatewayError) -> bytes:
        opening = b"".join(self._opening())  # the SDK needs response.created first
        code = err.code or err.type
        return opening + self._event("error", code=code, message=err.message, param=err.param)

    def end(self) -> bytes:
        return b""
