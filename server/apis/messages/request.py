"""The body of ``POST /v1/messages`` (Anthropic Messages API) and the chat request it
becomes.

Honoured: ``system`` (a string or text blocks), ``messages`` (``user`` / ``assistant`` /
``system`` turns of text blocks; an assistant turn's ``thinking`` blocks are its
thinking, as chat's ``reasoning_content``, read from their ``signature`` when it is set
(``server.apis.reasoning_seal``), and its ``tool_use`` blocks its calls; a user turn's
``tool_result`` blocks are the tools' results, chat's ``tool`` messages), ``tools``
(client tools: ``name``, ``description``, ``input_schema``) and ``tool_choice``
(``auto``, ``any``, ``tool`` naming one, ``none``: chat's ``auto``, ``required``, a named
function, ``none``; ``disable_parallel_tool_use``: at most one ``tool_use`` block,
chat's ``parallel_tool_calls: false``), ``max_tokens`` (required; thinking included, as
Anthropic counts it), ``temperature``, ``top_p``, ``top_k``, ``stop_sequences``,
``stream``, ``thinking`` (``enabled`` with ``budget_tokens``: the thinking budget, below
an ``X-Budget-Thinking`` header and under ``max_tokens``; ``disabled``: a thinking
budget of 0; ``adaptive``: the server plans it; ``display: omitted``: thinking blocks
without their text), ``output_config`` (``effort``: the effort table, alone an ``auto``
plan; ``format``: structured output), ``context_management`` (the
``clear_thinking_20251015`` edit); server tools (web search, code execution, bash,
...) are left out of the prompt and named in ``X-Thinkgate-Ignored``; thinkgate's
``strategy`` and ``budget`` and vLLM's ``seed``, ``min_p``, ``repetition_penalty``;
other fields pass on as strategy options.
Accepted and ignored: the fields ``server.apis.openai.sdk_fields`` says so of, and ``cache_control``
on blocks and tools. A 400 in Anthropic's envelope: a ``tool_choice`` forcing a server
tool, ``mcp_servers``, ``container``, ``thread``, other blocks (images,
documents), a last turn from the assistant (prefill), ``budget_tokens`` not below
``max_tokens`` (as Anthropic's API refuses it), and ``thinking`` together with a body
``budget.thinking``.

Here: the request and its translation; the conversation's content blocks are in
``server.apis.messages.content``.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    WithJsonSchema,
    field_validator,
)

from core.errors import InvalidRequest
from server.apis.chat_translation import to_chat
from server.apis.messages.content import Message, TextBlock, chat_messages
from server.apis.messages.render import MessagesCall
from server.apis.openai import sdk_fields
from server.apis.openai.protocol import BUDGET_SCHEMA, PositiveInt, TopP
from server.apis.openai.validation import Strict, set_fields, validate, validate_json
from server.apis.reasoning_seal import Seal

ROUTE: Final = "/v1/messages"


class Tool(Strict):
    """A client tool (Anthropic's ``custom`` type): chat's function tool."""

    type: Literal["custom"] | None = None
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    input_schema: dict[str, JsonValue]
    cache_control: JsonValue = None
    # Accepted: how Anthropic's platform offers and streams the tool (loaded on demand by
    # tool search, callers, input streaming, examples); the model here sees the tool
    # either way. strict: the grammar holds a call to its schema whatever it says.
    defer_loading: bool | None = None
    strict: bool | None = None
    allowed_callers: list[JsonValue] | None = None
    eager_input_streaming: bool | None = None
    input_examples: list[JsonValue] | None = None

    def as_chat(self) -> dict[str, object]:
        spec: dict[str, object] = {"name": self.name, "parameters": self.input_schema}
        if self.description is not None:
            spec["description"] = self.description
        return {"type": "function", "function": spec}


class ServerTool(BaseModel):
    """A tool Anthropic's platform runs or defines (``web_search_20250305``,
    ``code_execution_…``, ``bash_…``, ``text_editor_…``, ``computer_…``, ...): thinkgate
    runs none and has no schema for them, so they are left out of the prompt and named in
    the ``X-Thinkgate-Ignored`` header (``tools.<type>``); a ``tool_choice`` naming one is
    a 400."""

    model_config = ConfigDict(extra="allow")  # each server tool has its own options
    type: str
    name: str

    @field_validator("type")
    @classmethod
    def _dated(cls, kind: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", kind):
            raise ValueError(
                "a server tool's type is a name (web_search_20250305); a client tool's is "
                "custom or left out"
            )
        return kind


def _tool_kind(value: object) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "client-tool" if kind in (None, "custom") else "server-tool"


AnyTool = Annotated[
    Annotated[Tool, Tag("client-tool")] | Annotated[ServerTool, Tag("server-tool")],
    Discriminator(_tool_kind),
]


class ToolChoice(Strict):
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


Display = Literal["summarized", "omitted"]


class ThinkingEnabled(Strict):
    type: Literal["enabled"]
    budget_tokens: Annotated[int, Field(ge=0)]
    # omitted: thinking blocks carry no text (the thinking is billed, and sealed in the
    # signature); summarized: the whole thinking (there is no summariser).
    display: Display | None = None


class ThinkingAdaptive(Strict):
    """The server plans the thinking: ``output_config.effort`` (an auto plan) or the
    strategy's own."""

    type: Literal["adaptive"]
    display: Display | None = None


class ThinkingOff(Strict):
    type: Literal["disabled"]


class OutputFormat(Strict):
    type: Literal["json_schema"]
    json_schema: Annotated[dict[str, JsonValue], Field(alias="schema")]

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OutputConfig(Strict):
    """Anthropic's effort knob (the effort table, alone an auto plan) and structured
    output (an answer held to the schema by the grammar)."""

    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class KeepTurns(Strict):
    type: Literal["thinking_turns"]
    value: Annotated[int, Field(ge=0)]


class ClearThinking(Strict):
    """``context_management``'s thinking-clearing edit: earlier assistant turns lose
    their thinking, the last ``keep`` keep it (default 1; ``all``: nothing cleared)."""

    type: Literal["clear_thinking_20251015"]
    keep: KeepTurns | Literal["all"] | None = None

    def kept(self) -> int | None:
        if self.keep == "all":
            return None
        return 1 if self.keep is None else self.keep.value


class ContextManagement(Strict):
    edits: list[dict[str, JsonValue]] = []

    def clear_thinking(self) -> ClearThinking | None:
        found: ClearThinking | None = None
        for i, edit in enumerate(self.edits):
            kind = edit.get("type")
            where = f"context_management.edits.{i}"
            if kind == "clear_thinking_20251015":
                found = validate(ClearThinking, edit, prefix=where)
            else:
                raise InvalidRequest(
                    f"{where}: {kind!r} is not applied by thinkgate (clear_thinking_20251015 "
                    "is; tool-use clearing and compaction are the client's here)",
                    param=f"{where}.type",
                )
        return found


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
    thinking: (
        Annotated[ThinkingEnabled | ThinkingAdaptive | ThinkingOff, Field(discriminator="type")]
        | None
    ) = None
    output_config: OutputConfig | None = None
    context_management: ContextManagement | None = None

    @field_validator("thinking", mode="before")
    @classmethod
    def _thinking_offered(cls, value: object) -> object:
        return sdk_fields.refuse_part("messages.thinking", value)

    # thinkgate and vLLM (as on chat)
    strategy: str | None = None
    budget: Annotated[dict[str, JsonValue] | None, WithJsonSchema(BUDGET_SCHEMA)] = None
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    # Accepted and ignored (server.apis.openai.sdk_fields).
    metadata: dict[str, JsonValue] | None = None
    service_tier: str | None = None
    cache_control: JsonValue = None
    speed: str | None = None
    inference_geo: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None
    diagnostics: JsonValue = None
    compaction: JsonValue = None  # beta
    fallbacks: JsonValue = None  # beta
    fallback_credit_token: str | None = None  # beta
    billing_policy: JsonValue = None  # beta
    tools: list[AnyTool] | None = None
    tool_choice: ToolChoice | None = None
    # Refused unless neutral.
    mcp_servers: list[JsonValue] | None = None
    container: JsonValue = None
    thread: JsonValue = None  # beta

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
        if self.thread is not None:
            raise InvalidRequest(
                "thread: thinkgate keeps no threads; send the whole conversation in messages",
                param="thread",
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

    def chat_messages(self, seal: Seal | None = None) -> list[dict[str, object]]:
        """The conversation as chat messages, the thinking-clearing edit applied; signed
        thinking is opened with ``seal``."""
        return self._cleared(chat_messages(self.system, self.messages, seal))

    def _cleared(self, out: list[dict[str, object]]) -> list[dict[str, object]]:
        """``out`` with the thinking-clearing edit applied: the thinking of all but the
        last ``keep`` assistant turns dropped."""
        edit = self.context_management.clear_thinking() if self.context_management else None
        keep = edit.kept() if edit is not None else None
        if keep is None:
            return out
        thought = [i for i, m in enumerate(out) if "reasoning_content" in m]
        for i in thought[: max(0, len(thought) - keep)]:
            out[i] = {k: v for k, v in out[i].items() if k != "reasoning_content"}
        return out

    def server_tools(self) -> list[ServerTool]:
        return [t for t in self.tools or () if isinstance(t, ServerTool)]

    def chat_tools(self) -> tuple[list[dict[str, object]] | None, object]:
        """(chat's ``tools``: the client tools, chat's ``tool_choice``); a 400 for a
        choice that forces a server tool."""
        client = [t.as_chat() for t in self.tools or () if isinstance(t, Tool)]
        choice = self.tool_choice
        if choice is not None and choice.type == "tool":
            forced = next((t for t in self.server_tools() if t.name == choice.name), None)
            if forced is not None:
                raise InvalidRequest(
                    f"tool_choice.name: forces the server tool {forced.name!r} ({forced.type}), "
                    "which thinkgate does not run; offer it as a client tool (name, "
                    "input_schema) and run it yourself",
                    param="tool_choice.name",
                )
        return client or None, choice.as_chat() if choice is not None else None

    def thinking_budget(self) -> dict[str, JsonValue] | None:
        """The body budget, with ``thinking`` as its thinking field."""
        if self.thinking is None or isinstance(self.thinking, ThinkingAdaptive):
            return self.budget
        tokens = self.thinking.budget_tokens if isinstance(self.thinking, ThinkingEnabled) else 0
        return {**(self.budget or {}), "thinking": tokens}


def translate(raw: bytes, seal: Seal | None = None) -> MessagesCall:
    """A raw /v1/messages body as the chat request it means (400s name its fields);
    ``seal`` signs thinking blocks and opens the signatures given back."""
    body = validate_json(MessagesRequest, raw)
    body.refuse_unsupported()
    tools, tool_choice = body.chat_tools()
    out = body.output_config
    fmt = out.format if out is not None else None
    fields: dict[str, object] = {
        "model": body.model,
        "messages": body.chat_messages(seal),
        "reasoning_effort": out.effort if out is not None else None,
        "response_format": (
            None
            if fmt is None
            else {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": fmt.json_schema},
            }
        ),
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
    renames = {
        "stop": "stop_sequences",
        "reasoning_effort": "output_config.effort",
        "response_format": "output_config.format",
    }
    if isinstance(body.thinking, ThinkingEnabled):
        renames["budget.thinking"] = "thinking.budget_tokens"
    elif body.thinking is not None and body.thinking.type == "disabled":
        renames["budget.thinking"] = "thinking"
    display = getattr(body.thinking, "display", None)
    chat = to_chat(ROUTE, fields, body.model_extra or {})
    # Anthropic's rule: max_tokens past what the context leaves the prompt runs to the
    # context's end (stop_reason model_context_window_exceeded), not a 400. Harnesses
    # send one max_tokens (32,000) whatever the prompt.
    chat._cap_to_context = True
    return MessagesCall(
        chat=chat,
        renames=renames,
        ignored=(
            *sdk_fields.ignored(sdk_fields.MESSAGES, set_fields(body)),
            *sorted({f"tools.{t.type}" for t in body.server_tools()}),
        ),
        seal=seal,
        omit_thinking=display == "omitted",
    )
