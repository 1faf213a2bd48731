"""The items of a Responses ``input`` (messages, reasoning given back, function calls
given back and the tools' outputs) and the chat messages they become.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, JsonValue, model_validator

from core.errors import InvalidRequest
from server.apis.openai import sdk_fields
from server.apis.openai.validation import Strict, validate
from server.apis.reasoning_seal import Seal


class InputText(Strict):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[JsonValue] | None = None  # output_text given back
    logprobs: list[JsonValue] | None = None
    prompt_cache_breakpoint: JsonValue = None  # a caching hint (server.apis.openai.sdk_fields)

    @model_validator(mode="before")
    @classmethod
    def _offered(cls, value: object) -> object:
        return sdk_fields.refuse_part("responses.content", value, label="parts")


class InputMessage(Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputText]
    id: str | None = None  # an output message given back ...
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None
    thinkgate: dict[str, JsonValue] | None = None  # ... with our details: ignored

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class FunctionCallInput(Strict):
    """A call the model made, given back: the assistant's ``tool_calls`` on chat."""

    type: Literal["function_call"]
    call_id: Annotated[str, Field(min_length=1)]
    name: str
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    # Accepted (server.apis.openai.sdk_fields.PART_FIELDS): the call is the call either way.
    is_async: Annotated[bool | None, Field(alias="async")] = None
    caller: JsonValue = None
    namespace: str | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def as_chat(self) -> dict[str, object]:
        return {
            "id": self.call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class FunctionCallOutput(Strict):
    """A tool's result for a call: a ``tool`` message on chat."""

    type: Literal["function_call_output"]
    call_id: Annotated[str, Field(min_length=1)]
    output: str | list[InputText]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    # Accepted (server.apis.openai.sdk_fields.PART_FIELDS): the output answers its call_id.
    caller: JsonValue = None
    name: str | None = None
    namespace: str | None = None

    def as_chat(self) -> dict[str, object]:
        out = self.output
        text = out if isinstance(out, str) else "".join(part.text for part in out)
        return {"role": "tool", "tool_call_id": self.call_id, "content": text}


class ItemReference(Strict):
    """An item of a stored response, by id (server.apis.responses.request resolves it)."""

    type: Literal["item_reference"]
    id: Annotated[str, Field(min_length=1)]


class ReasoningText(Strict):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningInput(Strict):
    """A reasoning item given back: its text becomes the next assistant message's
    thinking, as chat's ``reasoning_content``."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[ReasoningText] = []
    content: list[ReasoningText] | None = None
    # The reasoning as this server sealed it (include reasoning.encrypted_content):
    # opened, it is the text (server.apis.reasoning_seal).
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def text(self, seal: Seal | None, *, param: str) -> str:
        if self.encrypted_content is not None:
            if seal is None:
                raise InvalidRequest(f"{param}: this server seals no reasoning", param=param)
            return seal.open(self.encrypted_content, "responses.reasoning", param=param)
        parts = self.content if self.content is not None else self.summary
        return "".join(p.text for p in parts)


ITEM_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "description": (
        "A message {role, content} (type message), a reasoning item, a function_call "
        "given back or a function_call_output."
    ),
    "properties": {
        "type": {
            "type": "string",
            "enum": ["message", "reasoning", "function_call", "function_call_output"],
        }
    },
}


def chat_messages(
    instructions: str | None, given: str | list[dict[str, JsonValue]], seal: Seal | None = None
) -> list[dict[str, object]]:
    """The conversation as chat messages (instructions first); sealed reasoning is
    opened with ``seal``."""
    out: list[dict[str, object]] = []
    if instructions is not None:
        out.append({"role": "system", "content": instructions})
    if isinstance(given, str):
        out.append({"role": "user", "content": given})
        return out
    thinking: str | None = None
    for i, raw in enumerate(given):
        kind = raw.get("type", "message")
        where = f"input.{i}"
        if kind == "reasoning":
            item = validate(ReasoningInput, raw, prefix=where)
            text = item.text(seal, param=f"{where}.encrypted_content")
            thinking = (thinking or "") + text
            continue
        if kind == "function_call":
            call = validate(FunctionCallInput, raw, prefix=where).as_chat()
            last = out[-1] if out else None
            # Calls right after the assistant's text (or its other calls) are that
            # turn's; after anything else they open an assistant turn of their own.
            if last is None or last["role"] != "assistant" or thinking is not None:
                last = {"role": "assistant", "content": ""}
                if thinking is not None:
                    last["reasoning_content"] = thinking
                    thinking = None
                out.append(last)
            calls = last.setdefault("tool_calls", [])
            assert isinstance(calls, list)
            calls.append(call)
            continue
        if kind == "function_call_output":
            out.append(validate(FunctionCallOutput, raw, prefix=where).as_chat())
            continue
        if kind != "message":
            why = sdk_fields.part_refused("responses.input", kind) or "an unknown item"
            raise InvalidRequest(
                f"{where}: item type {kind!r} is not supported: {why} (messages, "
                "reasoning, function_call and function_call_output items are)",
                param=f"{where}.type",
            )
        msg = validate(InputMessage, raw, prefix=where)
        chat: dict[str, object] = {"role": msg.role, "content": msg.text()}
        if msg.role == "assistant" and thinking is not None:
            chat["reasoning_content"] = thinking
            thinking = None
        out.append(chat)
    return out
