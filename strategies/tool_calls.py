"""Tool calls in an answer: the Hermes/Qwen form reasoning models write after thinking,
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call.

Only a complete block holding a JSON object with a string ``name`` and an object of
``arguments`` is a call; anything else (an unclosed block cut by a budget, broken JSON)
stays in the answer's text, so a cut call reads as the cut text it is. The server renders
calls as OpenAI ``tool_calls``; the sampling strategies vote on :func:`vote_key`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final, Literal

OPEN: Final = "<tool_call>"
CLOSE: Final = "</tool_call>"
KEY_PREFIX: Final = "tool_calls:"
"""Starts a vote key of tool calls: such keys compare as exact strings
(``strategies.answers.group_answers``), never as mathematics."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # the arguments object as JSON text (what OpenAI clients read)


@dataclass(frozen=True, slots=True)
class CallForm:
    """How an answer holds its calls: ``tags`` (the model's own ``<tool_call>`` blocks,
    ``tool_choice: auto``), or JSON the engine's grammar held it to: ``named`` (the
    arguments object of the function ``name``), ``required`` (an array of
    ``{"name", "parameters"}``), ``either`` (that array, or an answer in the client's JSON
    format: ``tool_choice: auto`` with a ``response_format``). ``single``: at most one
    call per answer (chat's ``parallel_tool_calls: false``): the first the model wrote;
    the others are dropped (a ``required`` answer is held to one by its grammar
    already)."""

    kind: Literal["tags", "named", "required", "either"]
    name: str | None = None
    single: bool = False


@dataclass(frozen=True, slots=True)
class Parsed:
    content: str  # the answer without its calls (stripped when there were calls)
    calls: tuple[ToolCall, ...]


def parse_tool_calls(text: str) -> Parsed:
    """The calls in ``text`` and what is left of it."""
    calls: list[ToolCall] = []
    rest: list[str] = []
    pos = 0
    while (start := text.find(OPEN, pos)) >= 0:
        end = text.find(CLOSE, start)
        if end < 0:
            break  # unclosed: cut, stays text
        call = _call(text[start + len(OPEN) : end])
        stop = end + len(CLOSE)
        rest.append(text[pos:stop] if call is None else text[pos:start])
        if call is not None:
            calls.append(call)
        pos = stop
    rest.append(text[pos:])
    content = "".join(rest)
    return Parsed(content=content.strip() if calls else content, calls=tuple(calls))


def _call(body: str) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    arguments = obj.get("arguments", {})
    if not isinstance(arguments, dict):
        return None
    return ToolCall(name=obj["name"], arguments=_dumps(arguments))


def vote_key(text: str) -> str | None:
    """The answer's calls as one canonical value (names and arguments, keys sorted), or
    None when it makes none."""
    calls = parse_tool_calls(text).calls
    if not calls:
        return None
    value = [[c.name, json.loads(c.arguments)] for c in calls]
    return KEY_PREFIX + json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def read_calls(text: str, form: CallForm) -> Parsed:
    """The calls of an answer in ``form`` (a forced form whose JSON was cut: no calls,
    the text as it is); with ``form.single``, the first only."""
    parsed = _read(text, form)
    if form.single and len(parsed.calls) > 1:
        return Parsed(content=parsed.content, calls=parsed.calls[:1])
    return parsed


def _read(text: str, form: CallForm) -> Parsed:
    if form.kind == "tags":
        return parse_tool_calls(text)
    try:
        value = json.loads(text)
    except ValueError:
        return Parsed(content=text, calls=())
    if form.kind == "named" and isinstance(value, dict) and form.name is not None:
        return Parsed(content="", calls=(ToolCall(form.name, _dumps(value)),))
    if form.kind in ("required", "either") and isinstance(value, list) and value:
        calls = [
            ToolCall(item["name"], _dumps(item["parameters"]))
            for item in value
            if isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("parameters"), dict)
        ]
        if len(calls) == len(value):
            return Parsed(content="", calls=tuple(calls))
    return Parsed(content=text, calls=())


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)
