"""The parts of a chat completions request: its messages (text parts, tool calls given
back), its tools and tool choice, and its ``response_format`` (with the engine's
constraint for it).
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from core.engine import StructuredOutput
from core.errors import InvalidRequest
from server.apis.openai import sdk_fields


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: JsonValue = None  # a caching hint (server.apis.openai.sdk_fields)


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1)]
    arguments: str  # a JSON object, as text (OpenAI's form)


class ToolCallIn(BaseModel):
    """A tool call an assistant turn made, given back by the client."""

    model_config = ConfigDict(extra="forbid")
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        # What ``_content_present`` checks, in the published schema (/openapi.json).
        json_schema_extra={
            "if": {"properties": {"role": {"const": "assistant"}}},
            "else": {"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
        },
    )
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    refusal: str | None = None  # an assistant turn's refusal, given back: its content counts
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallIn] | None = None  # assistant turns
    tool_call_id: str | None = None  # tool turns: the call answered

    @model_validator(mode="before")
    @classmethod
    def _refused_parts(cls, value: object) -> object:
        # The SDK's parts thinkgate cannot give, with why (server.apis.openai.sdk_fields).
        if not isinstance(value, dict):
            return value
        why = sdk_fields.part_refused("chat.role", value.get("role"))
        fields = sdk_fields.PART_FIELDS["chat.role.assistant"]
        for key in ("audio", "function_call"):
            if why is None and value.get(key) is not None:
                why = f"{key}: {fields[key].note}"
        content = value.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            if why is None and (refused := sdk_fields.part_refused("chat.content", kind)):
                why = f"{kind} parts: {refused}"
        if why is not None:
            raise ValueError(why)
        return value

    @model_validator(mode="after")
    def _content_present(self) -> ChatMessage:
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs content")
        return self

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""

    def for_template(self) -> dict[str, object]:
        """The message as a chat template reads it (text parts joined)."""
        out: dict[str, object] = {"role": self.role, "content": self.text()}
        reasoning = self.reasoning_content if self.reasoning_content is not None else self.reasoning
        if self.role == "assistant" and reasoning is not None:
            out["reasoning_content"] = reasoning
        if self.role == "assistant" and self.tool_calls:
            # Templates read arguments as a mapping (Hugging Face's convention).
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": _arguments(call)},
                }
                for call in self.tool_calls
            ]
        if self.role == "tool" and self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


def _arguments(call: ToolCallIn) -> object:
    try:
        value = json.loads(call.function.arguments)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise InvalidRequest(
            f"tool call {call.id!r}: function.arguments must be a JSON object (as text)",
            param="messages",
        )
    return value


class JsonSchemaSpec(BaseModel):
    """``response_format.json_schema``: OpenAI's named schema."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: str | None = None
    # ``schema`` would shadow BaseModel.schema, hence the alias.
    json_schema: Annotated[dict[str, JsonValue] | None, Field(alias="schema")] = None
    # Accepted: the grammar always holds the answer to the schema (what strict asks).
    strict: bool | None = None


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, JsonValue] | None = None
    strict: bool | None = None


class ToolDef(BaseModel):
    """One of ``tools``: a function the model may call."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: FunctionDef

    @model_validator(mode="before")
    @classmethod
    def _offered(cls, value: object) -> object:
        return sdk_fields.refuse_part("chat.tools", value)


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: NamedFunction


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_object"]


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[
    TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")
]


def structured_output(fmt: ResponseFormat | None) -> StructuredOutput | None:
    """The engine's constraint for a ``response_format`` (None: free text)."""
    if fmt is None or isinstance(fmt, TextFormat):
        return None
    if isinstance(fmt, JsonObjectFormat) or fmt.json_schema.json_schema is None:
        return StructuredOutput(kind="json_object")
    schema = json.dumps(fmt.json_schema.json_schema, sort_keys=True, separators=(",", ":"))
    return StructuredOutput(kind="json_schema", schema=schema)
