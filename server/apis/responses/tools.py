"""The tools of a Responses request (function tools, namespace groups of them, hosted
tools left out) and its ``tool_choice``, as chat's.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, JsonValue

from core.errors import InvalidRequest
from server.apis.openai import sdk_fields
from server.apis.openai.validation import Strict, validate


class FunctionTool(Strict):
    """A function the model may call (the Responses API's flat form of chat's tool)."""

    type: Literal["function"]
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, JsonValue] | None = None
    strict: bool | None = None
    # Accepted: how OpenAI's platform schedules and offers the call (deferred loading,
    # asynchronous calls, who may call it, its output's schema); the model here sees
    # the function either way.
    defer_loading: bool | None = None
    allowed_callers: list[JsonValue] | None = None
    output_schema: dict[str, JsonValue] | None = None
    async_: Annotated[bool | None, Field(alias="async")] = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def as_chat(self) -> dict[str, object]:
        spec = self.model_dump(
            include={"name", "description", "parameters", "strict"}, exclude_none=True
        )
        return {"type": "function", "function": spec}

    def echo(self) -> dict[str, object]:
        return self.model_dump(by_alias=True, exclude_none=True)


class NamespaceTool(Strict):
    """A group of functions (coding harnesses send their tools so): its functions are
    functions, named as in the group."""

    type: Literal["namespace"]
    name: str
    description: str | None = None
    tools: list[FunctionTool]


TOOL_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "description": (
        "A function tool {type: function, name, parameters}, a namespace group of them "
        "{type: namespace, name, tools}, or a hosted tool (left out: thinkgate runs none)."
    ),
    "properties": {"type": {"type": "string"}},
    "required": ["type"],
}


TOOL_TYPE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def functions_of(raw: list[dict[str, JsonValue]] | None) -> tuple[list[FunctionTool], list[str]]:
    """(the function tools, flattened out of namespace groups; the hosted tools' types,
    which are left out)."""
    functions: list[FunctionTool] = []
    hosted: list[str] = []
    for i, tool in enumerate(raw or ()):
        kind = tool.get("type")
        if kind == "function":
            functions.append(validate(FunctionTool, tool, prefix=f"tools.{i}"))
        elif kind == "namespace":
            functions += validate(NamespaceTool, tool, prefix=f"tools.{i}").tools
        elif isinstance(kind, str) and TOOL_TYPE.match(kind):
            hosted.append(kind)
        else:
            raise InvalidRequest(
                f"tools.{i}: a tool needs its type (function, namespace or a hosted tool's name)",
                param=f"tools.{i}.type",
            )
    return functions, hosted


class NamedFunctionChoice(Strict):
    type: Literal["function"]
    name: str


def chat_tools(
    raw: list[dict[str, JsonValue]] | None,
    choice: Literal["none", "auto", "required"] | NamedFunctionChoice | dict[str, JsonValue] | None,
) -> tuple[list[dict[str, object]] | None, object]:
    """(chat's ``tools``, chat's ``tool_choice``)."""
    functions, _ = functions_of(raw)
    tools = [t.as_chat() for t in functions] if functions else None
    if isinstance(choice, dict):
        kind = choice.get("type")
        why = sdk_fields.part_refused("responses.tool_choice", kind) or (
            sdk_fields.PARTS["responses.tool_choice"]["hosted"].note
        )
        raise InvalidRequest(
            f"tool_choice: {kind!r}: {why} (function tools and none/auto/required are chosen)",
            param="tool_choice",
        )
    if isinstance(choice, NamedFunctionChoice):
        return tools, {"type": "function", "function": {"name": choice.name}}
    return tools, choice
