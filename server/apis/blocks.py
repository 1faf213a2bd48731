"""A strategy's output as a sequence of text blocks: what the Responses and Anthropic
streams are made of (output items, content blocks).

Each choice, in index order, is its thinking block (when it has thinking text), its
answer block (always, even when empty, unless the answer is only tool calls), then one
block per tool call when the request offered tools (``CallForm``: the answer read for
calls, its text without them). ``Blocks`` turns a strategy's live
``ChoiceDelta``s and its ``Result`` into ``Opened`` / ``Text`` / ``Closed`` events at
increasing positions; a choice that was not streamed live (a multi-sample strategy's
chosen answers) is replayed whole from the result. ``of_result`` gives the same blocks
for a non-streamed response, so a stream's blocks always equal the response's. With tools
offered the answer is held back, as on chat: what looks like text may be a call, so its
text and calls come at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from core.base import Choice, ChoiceDelta, Result
from strategies.tool_calls import CallForm, ToolCall, read_calls

BlockKind = Literal["thinking", "answer", "call"]


@dataclass(frozen=True, slots=True)
class Opened:
    position: int  # the block's place in the response (output index, content index)
    kind: BlockKind
    call: ToolCall | None = None  # a call block's call (its name opens the block)


@dataclass(frozen=True, slots=True)
class Text:
    position: int
    kind: BlockKind
    text: str


@dataclass(frozen=True, slots=True)
class Closed:
    position: int
    kind: BlockKind
    text: str  # the block's whole text (a call block: its arguments)
    choice: Choice | None  # the finished choice (answer and call blocks at the result)
    call: ToolCall | None = None


BlockEvent = Opened | Text | Closed


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a finished response."""

    position: int
    kind: BlockKind
    text: str
    choice: Choice
    call: ToolCall | None = None


def answer_of(c: Choice, form: CallForm | None) -> tuple[str, tuple[ToolCall, ...]]:
    """A choice's answer text and its tool calls (none unless tools were offered)."""
    if form is None:
        return c.content, ()
    parsed = read_calls(c.content, form)
    return parsed.content, parsed.calls


def of_result(final: Result, form: CallForm | None = None) -> list[Block]:
    """The blocks of a finished result (a non-streamed response)."""
    blocks: list[Block] = []
    for c in sorted(final.choices, key=lambda c: c.index):
        if c.reasoning:
            blocks.append(Block(len(blocks), "thinking", c.reasoning, c))
        text, calls = answer_of(c, form)
        if text or not calls:
            blocks.append(Block(len(blocks), "answer", text, c))
        blocks += [Block(len(blocks), "call", call.arguments, c, call) for call in calls]
    return blocks


@dataclass(slots=True)
class _Open:
    position: int
    kind: BlockKind
    choice: int
    parts: list[str] = field(default_factory=list)


class Blocks:
    """The block events of one stream, from the strategy's events in order."""

    def __init__(self, form: CallForm | None = None) -> None:
        self._form = form  # tools offered: answers held back and read for calls
        self._next = 0
        self._open: _Open | None = None
        self._answered: set[int] = set()  # choices whose answer block was opened
        self._started: set[int] = set()  # choices streamed live

    def delta(self, d: ChoiceDelta) -> list[BlockEvent]:
        """The events of one live delta (none for a delta without text)."""
        self._started.add(d.index)
        out: list[BlockEvent] = []
        if d.reasoning:
            out += self._write(d.index, "thinking", d.reasoning)
        if d.content and self._form is None:
            out += self._write(d.index, "answer", d.content)
        return out

    def final(self, final: Result) -> list[BlockEvent]:
        """The closing events: replayed choices and held answers, then every answer block
        closed with its finished choice (opened empty where the choice streamed no answer
        text), then its calls."""
        out: list[BlockEvent] = []
        for c in sorted(final.choices, key=lambda c: c.index):
            replay = c.index not in self._started  # not streamed live: replayed whole
            if replay:
                self._started.add(c.index)
                if c.reasoning:
                    out += self._write(c.index, "thinking", c.reasoning)
            held = replay or self._form is not None  # its answer text not yet sent
            text, calls = answer_of(c, self._form)
            if text or not calls:
                if held or c.index not in self._answered:
                    out += self._switch(c.index, "answer")
                if text and held:
                    out += self._write(c.index, "answer", text)
                if self._open is not None and (self._open.choice, self._open.kind) == (
                    c.index,
                    "answer",
                ):
                    out += self._close(c)
            for call in calls:
                out += self._close(None)
                at = self._next
                self._next += 1
                out += [
                    Opened(at, "call", call),
                    Text(at, "call", call.arguments),
                    Closed(at, "call", call.arguments, c, call),
                ]
        out += self._close(None)
        return out

    def _write(self, choice: int, kind: BlockKind, text: str) -> list[BlockEvent]:
        out = self._switch(choice, kind)
        assert self._open is not None
        self._open.parts.append(text)
        out.append(Text(self._open.position, kind, text))
        return out

    def _switch(self, choice: int, kind: BlockKind) -> list[BlockEvent]:
        """Make the open block ``choice``'s ``kind`` block, closing the one before."""
        if self._open is not None and (self._open.choice, self._open.kind) == (choice, kind):
            return []
        out = self._close(None)
        self._open = _Open(self._next, kind, choice)
        self._next += 1
        if kind == "answer":
            self._answered.add(choice)
        out.append(Opened(self._open.position, kind))
        return out

    def _close(self, choice: Choice | None) -> list[BlockEvent]:
        if self._open is None:
            return []
        block, self._open = self._open, None
        return [Closed(block.position, block.kind, "".join(block.parts), choice)]
