"""A strategy's output as a sequence of text blocks: what the Responses and Anthropic
streams are made of (output items, content blocks).

Each choice, in index order, is its thinking block (when it has thinking text) then its
answer block (always, even when empty). ``Blocks`` turns a strategy's live
``ChoiceDelta``s and its ``Result`` into ``Opened`` / ``Text`` / ``Closed`` events at
increasing positions; a choice that was not streamed live (a multi-sample strategy's
chosen answers) is replayed whole from the result. ``of_result`` gives the same blocks
for a non-streamed response, so a stream's blocks always equal the response's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from core.base import Choice, ChoiceDelta, Result

BlockKind = Literal["thinking", "answer"]


@dataclass(frozen=True, slots=True)
class Opened:
    position: int  # the block's place in the response (output index, content index)
    kind: BlockKind


@dataclass(frozen=True, slots=True)
class Text:
    position: int
    kind: BlockKind
    text: str


@dataclass(frozen=True, slots=True)
class Closed:
    position: int
    kind: BlockKind
    text: str  # the block's whole text
    choice: Choice | None  # the finished choice (answer blocks at the result)


BlockEvent = Opened | Text | Closed


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a finished response."""

    position: int
    kind: BlockKind
    text: str
    choice: Choice


def of_result(final: Result) -> list[Block]:
    """The blocks of a finished result (a non-streamed response)."""
    blocks: list[Block] = []
    for c in sorted(final.choices, key=lambda c: c.index):
        if c.reasoning:
            blocks.append(Block(len(blocks), "thinking", c.reasoning, c))
        blocks.append(Block(len(blocks), "answer", c.content, c))
    return blocks


@dataclass(slots=True)
class _Open:
    position: int
    kind: BlockKind
    choice: int
    parts: list[str] = field(default_factory=list)


class Blocks:
    """The block events of one stream, from the strategy's events in order."""

    def __init__(self) -> None:
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
        if d.content:
            out += self._write(d.index, "answer", d.content)
        return out

    def final(self, final: Result) -> list[BlockEvent]:
        """The closing events: replayed choices, then every answer block closed with its
        finished choice (opened empty where the choice streamed no answer text)."""
        out: list[BlockEvent] = []
        for c in sorted(final.choices, key=lambda c: c.index):
            if c.index not in self._started:  # not streamed live: replayed whole
                self._started.add(c.index)
                if c.reasoning:
                    out += self._write(c.index, "thinking", c.reasoning)
                out += self._switch(c.index, "answer")
                if c.content:
                    out += self._write(c.index, "answer", c.content)
            elif c.index not in self._answered:
                out += self._switch(c.index, "answer")
            if self._open is not None and (self._open.choice, self._open.kind) == (
                c.index,
                "answer",
            ):
                out += self._close(c)
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
