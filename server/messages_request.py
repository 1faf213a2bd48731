"""The body of ``POST /v1/messages`` (Anthropic Messages API) and the chat request it
becomes.

Honoured: ``system`` (a string or text blocks), ``messages`` (``user`` / ``assistant``
turns of text blocks; an assistant turn's ``thinking`` blocks are its thinking, as
chat's ``reasoning_content``, and its ``tool_use`` blocks its calls; a user turn's
``tool_result`` blocks are the tools' results, chat's ``tool`` messages), ``tools``
(client tools: ``name``, ``description``, ``input_schema``) and ``tool_choice``
(``auto``, ``any``, ``tool`` naming one, ``none``: chat's ``auto``, ``required``, a
named function, ``none``; ``disable_parallel_tool_use``: at most one ``tool_use`` block,
chat's ``parallel_tool_calls: false``), ``max_tokens`` (required; thinking included, as
Anthropic counts it), ``temperature``, ``top_p``, ``top_k``, ``stop_sequences``,
``stream``, ``thinking`` (``enabled`` with ``budget_tokens``: the thinking budget, below
an ``X-Budget-Thinking`` header and under ``max_tokens``; ``disabled``: a thinking
budget of 0; ``adaptive``: no budget); thinkgate's ``strategy`` and ``budget`` and
vLLM's ``seed``, ``min_p``, ``repetition_penalty``; other fields pass on as strategy
options. Accepted and ignored: ``metadata``, ``service_tier``, ``cache_control`` on
blocks and tools. A 400 in Anthropic's envelope: server tools (web search, code
execution, ...), ``mcp_servers``, ``container``, other blocks (images, documents), a
last turn from the assistant (prefill), ``budget_tokens`` not below ``max_tokens`` (as
Anthropic's API refuses it), and ``thinking`` together with a body ``budget.thinking``.
"""

from __future__ import annotations

import json
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema

from core.errors import InvalidRequest
from server.chat_translation import to_chat
from server.messages_render import MessagesCall
from server.protocol import BUDGET_SCHEMA, PositiveInt, TopP, validate, validate_json

ROUTE: Final = "/v1/messages"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Strict):
    type: Literal["text"]
    text: str
    cache_control: JsonValue = None  # a caching hint: nothing to cache here
    citations: list[JsonValue] | None = None


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class ToolUseBlock(_Strict):
    """A call the assistant made, given back: chat's ``tool_calls``."""

    type: Literal["tool_use"]
    id: Annotated[str, Field(min_length=1)]
    name: str
    input: dict[str, JsonValue]
    cache_control: JsonValue = None

    def as_chat(self) -> dict[str, object]:
        arguments = json.dumps(self.input, ensure_ascii=False)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


class ToolResultBlock(_Strict):
    """A tool's result in a user turn: a chat ``tool`` message."""

    type: Literal["tool_result"]
    tool_use_id: Annotated[str, Field(min_length=1)]
    content: str | list[TextBlock] = ""
    is_error: bool | None = None  # the model reads the text either way
    cache_control: JsonValue = None

    def as_chat(self) -> dict[str, object]:
        c = self.content
        text = c if isinstance(c, str) else "".join(b.text for b in c)
        return {"role": "tool", "tool_call_id": self.tool_use_id, "content": text}


class Tool(_Strict):
    """A client tool (Anthropic's ``custom`` type): chat's function tool."""

    type: Literal["custom"] | None = None
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    input_schema: dict[str, JsonValue]
    cache_control: JsonValue = None

    def as_chat(self) -> dict[str, object]:
        spec: dict[str, object] = {"name": self.name, "parameters": self.input_schema}
        if self.description is not None:
            spec["description"] = self.description
        return {"type": "function", "function": spec}


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None  # true: at most one tool_use block

    def as_chat(self) -> object:
        if self.type == "tool":
            if self.name is None:
                raise InvalidRequest(
                    "tool_choice of type tool needs its name", param="tool_choice.name"
                )
            return {"type": "function", "function": {"name": self.name}}
        return {"auto": "auto", "any": "required", "none": "none"}[self.type]


class RedactedThinking(_Strict):
    type: Literal["redacted_thinking"]
    data: str


_BLOCK_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "description": (
        "A content block: text (any turn), thinking and tool_use (assistant turns), "
        "tool_result (user turns)."
    ),
    "properties": {
        "type": {"type": "string", "enum": ["text", "thinking", "tool_use", "tool_result"]}
    },
}
Block = Annotated[dict[str, JsonValue], WithJsonSchema(_BLOCK_SCHEMA)]


class Message(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class ThinkingEnabled(_Strict):
    type: Literal["enabled"]
    budget_tokens: Annotated[int, Field(ge=0)]


class ThinkingOff(_Strict):
    type: Literal["disabled", "adaptive"]


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # strategy options (module doc)

    model: str
    max_tokens: PositiveInt
    messages: Annotated[list[Message], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_p: TopP | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    stop_sequences: Annotated[list[str], Field(max_length=16)] | None = None
    stream: bool = False
    thinking: Annotated[ThinkingEnabled | ThinkingOff, Field(discriminator="type")] | None = None
    # thinkgate and vLLM (as on chat)
    strategy: str | None = None
    budget: Annotated[dict[str, JsonValue] | None, WithJsonSchema(BUDGET_SCHEMA)] = None
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    # Accepted and ignored.
    metadata: dict[str, JsonValue] | None = None
    service_tier: str | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    # Refused unless neutral.
    mcp_servers: list[JsonValue] | None = None
    container: JsonValue = None

    def refuse_unsupported(self) -> None:
        refusals = (
            ("mcp_servers", bool(self.mcp_servers)),
            ("container", self.container is not None),
        )
        for param, refused in refusals:
            if refused:
                raise InvalidRequest(
                    f"{param}: server tools are not supported by thinkgate (client tools are)",
                    param=param,
                )
        if self.messages[-1].role == "assistant":
            raise InvalidRequest(
                "messages: the last turn must be the user's (a prefilled assistant turn is "
                "not supported)",
                param=f"messages.{len(self.messages) - 1}.role",
            )
        thinking = self.thinking
        if isinstance(thinking, ThinkingEnabled) and thinking.budget_tokens >= self.max_tokens:
            raise InvalidRequest(
                f"thinking.budget_tokens ({thinking.budget_tokens}) must be less than "
                f"max_tokens ({self.max_tokens})",
                param="thinking.budget_tokens",
            )
        if self.thinking is not None and self.budget and "thinking" in self.budget:
            raise InvalidRequest(
                "thinking and budget.thinking both set the thinking budget; send one",
                param="thinking",
            )

    def chat_messages(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        if self.system is not None:
            system = self.system
            text = system if isinstance(system, str) else "".join(b.text for b in system)
            out.append({"role": "system", "content": text})
        for i, msg in enumerate(self.messages):
            if isinstance(msg.content, str):
                out.append({"role": msg.role, "content": msg.content})
                continue
            texts: list[str] = []
            thinking: list[str] = []
            calls: list[dict[str, object]] = []
            for j, raw in enumerate(msg.content):
                where = f"messages.{i}.content.{j}"
                kind = raw.get("type")
                if kind == "text":
                    texts.append(validate(TextBlock, raw, prefix=where).text)
                elif kind in ("thinking", "redacted_thinking") and msg.role == "assistant":
                    if kind == "thinking":
                        thinking.append(validate(ThinkingBlock, raw, prefix=where).thinking)
                    else:
                        validate(RedactedThinking, raw, prefix=where)  # opaque: dropped
                elif kind == "tool_use" and msg.role == "assistant":
                    calls.append(validate(ToolUseBlock, raw, prefix=where).as_chat())
                elif kind == "tool_result" and msg.role == "user":
                    # Results answer the turn before; chat puts them ahead of new text.
                    out.append(validate(ToolResultBlock, raw, prefix=where).as_chat())
                else:
                    raise InvalidRequest(
                        f"{where}: {kind!r} blocks are not supported in {msg.role} turns "
                        "(text; thinking and tool_use in assistant turns; tool_result in "
                        "user turns)",
                        param=f"{where}.type",
                    )
            if msg.role == "user" and not texts and out and out[-1]["role"] == "tool":
                continue  # a turn of tool results only
            chat: dict[str, object] = {"role": msg.role, "content": "".join(texts)}
            if thinking:
                chat["reasoning_content"] = "".join(thinking)
            if calls:
                chat["tool_calls"] = calls
            out.append(chat)
        return out

    def chat_tools(self) -> tuple[list[dict[str, object]] | None, object]:
        """(chat's ``tools``, chat's ``tool_choice``)."""
        tools = [t.as_chat() for t in self.tools] if self.tools else None
        choice = self.tool_choice.as_chat() if self.tool_choice is not None else None
        return tools, choice

    def thinking_budget(self) -> dict[str, JsonValue] | None:
        """The body budget, with ``thinking`` as its thinking field."""
        if self.thinking is None or self.thinking.type == "adaptive":
            return self.budget
        tokens = self.thinking.budget_tokens if isinstance(self.thinking, ThinkingEnabled) else 0
        return {**(self.budget or {}), "thinking": tokens}


def translate(raw: bytes) -> MessagesCall:
    """A raw /v1/messages body as the chat request it means (400s name its fields)."""
    body = validate_json(MessagesRequest, raw)
    body.refuse_unsupported()
    tools, tool_choice = body.chat_tools()
    fields: dict[str, object] = {
        "model": body.model,
        "messages": body.chat_messages(),
        "max_tokens": body.max_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "top_k": body.top_k,
        "stop": body.stop_sequences,
        "stream": body.stream,
        "strategy": body.strategy,
        "budget": body.thinking_budget(),
        "seed": body.seed,
        "min_p": body.min_p,
        "repetition_penalty": body.repetition_penalty,
        "tools": tools,
        "tool_choice": tool_choice,
        "parallel_tool_calls": (
            False
            if body.tool_choice is not None and body.tool_choice.disable_parallel_tool_use
            else None
        ),
    }
    renames = {"stop": "stop_sequences"}
    if isinstance(body.thinking, ThinkingEnabled):
        renames["budget.thinking"] = "thinking.budget_tokens"
    elif body.thinking is not None and body.thinking.type == "disabled":
        renames["budget.thinking"] = "thinking"
    return MessagesCall(chat=to_chat(ROUTE, fields, body.model_extra or {}), renames=renames)
