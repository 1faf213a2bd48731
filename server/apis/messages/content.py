"""The content of a Messages conversation (text, thinking, ``tool_use`` and
``tool_result`` blocks in its turns) and the chat messages it becomes.
"""

from __future__ import annotations

import json
from typing import Annotated, Final, Literal

from pydantic import Field, JsonValue, WithJsonSchema

from core.errors import InvalidRequest
from server.apis.openai import sdk_fields
from server.apis.openai.validation import Strict, validate
from server.apis.reasoning_seal import Seal


class TextBlock(Strict):
    type: Literal["text"]
    text: str
    cache_control: JsonValue = None  # a caching hint: nothing to cache here
    citations: list[JsonValue] | None = None
    # The details this server put on an answer's block: a client that sends the answer
    # back as the assistant turn (Anthropic's multi-turn pattern) sends them too. Ignored.
    thinkgate: JsonValue = None


class ThinkingBlock(Strict):
    type: Literal["thinking"]
    thinking: str
    # This server's seal of the thinking (server.apis.reasoning_seal): opened, it is the
    # thinking (a block shown with display omitted carries no text of its own).
    signature: str | None = None

    def text(self, seal: Seal | None, *, where: str) -> str:
        if not self.signature or seal is None:
            return self.thinking  # unsigned (an older client's, a hand-written turn)
        sealed = seal.open(self.signature, "messages.thinking", param=f"{where}.signature")
        if self.thinking and self.thinking != sealed:
            raise InvalidRequest(
                f"{where}.thinking: the thinking differs from what its signature seals "
                "(give the block back as this server returned it)",
                param=f"{where}.thinking",
            )
        return sealed


class ToolUseBlock(Strict):
    """A call the assistant made, given back: chat's ``tool_calls``."""

    type: Literal["tool_use"]
    id: Annotated[str, Field(min_length=1)]
    name: str
    input: dict[str, JsonValue]
    cache_control: JsonValue = None
    # Who called it and from which tool set (programmatic calling, tool search): the
    # call is the call either way.
    caller: JsonValue = None
    toolset_name: str | None = None

    def as_chat(self) -> dict[str, object]:
        arguments = json.dumps(self.input, ensure_ascii=False)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


class ToolResultBlock(Strict):
    """A tool's result in a user turn: a chat ``tool`` message."""

    type: Literal["tool_result"]
    tool_use_id: Annotated[str, Field(min_length=1)]
    content: str | list[TextBlock] = ""
    is_error: bool | None = None  # the model reads the text either way
    cache_control: JsonValue = None
    toolset_name: str | None = None

    def as_chat(self) -> dict[str, object]:
        c = self.content
        text = c if isinstance(c, str) else "".join(b.text for b in c)
        return {"role": "tool", "tool_call_id": self.tool_use_id, "content": text}


class RedactedThinking(Strict):
    type: Literal["redacted_thinking"]
    data: str


BLOCK_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "description": (
        "A content block: text (any turn), thinking and tool_use (assistant turns), "
        "tool_result (user turns)."
    ),
    "properties": {
        "type": {"type": "string", "enum": ["text", "thinking", "tool_use", "tool_result"]}
    },
}
Block = Annotated[dict[str, JsonValue], WithJsonSchema(BLOCK_SCHEMA)]


class Message(Strict):
    # A system turn inside the conversation (the 2026 API): a system message there.
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


def chat_messages(
    system: str | list[TextBlock] | None, messages: list[Message], seal: Seal | None = None
) -> list[dict[str, object]]:
    """The system prompt and the turns as chat messages (tool results as ``tool``
    messages); signed thinking is opened with ``seal``."""
    out: list[dict[str, object]] = []
    if system is not None:
        text = system if isinstance(system, str) else "".join(b.text for b in system)
        out.append({"role": "system", "content": text})
    for i, msg in enumerate(messages):
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
                    block = validate(ThinkingBlock, raw, prefix=where)
                    thinking.append(block.text(seal, where=where))
                else:
                    validate(RedactedThinking, raw, prefix=where)  # opaque: dropped
            elif kind == "tool_use" and msg.role == "assistant":
                calls.append(validate(ToolUseBlock, raw, prefix=where).as_chat())
            elif kind == "tool_result" and msg.role == "user":
                # Results answer the turn before; chat puts them ahead of new text.
                out.append(validate(ToolResultBlock, raw, prefix=where).as_chat())
            else:
                why = sdk_fields.part_refused("messages.content", kind)
                raise InvalidRequest(
                    f"{where}: {kind!r} blocks are not supported in {msg.role} turns"
                    + (f": {why}" if why else "")
                    + " (text; thinking and tool_use in assistant turns; tool_result in "
                    "user turns; text in system turns)",
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
