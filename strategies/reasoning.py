"""Splitting a trajectory into thinking and answer, by token ids.

vLLM's output text leaves special tokens such as ``</think>`` out, so the split
is made on ids, and each part is decoded on its own. Token counts are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strategies.engine import ModelTokens


def thinking_open_after(prompt_ids: Sequence[int], tokens: ModelTokens) -> bool:
    """Whether a prompt leaves thinking open: its last think tag is ``<think>``.

    Chat templates in the R1/Qwen3 style end the generation prompt with
    ``<think>``; raw completions prompts may or may not.
    """
    start, end = tokens.think_start_id, tokens.think_end_id
    if start is None or end is None:
        return False
    for tok in reversed(prompt_ids):
        if tok == end:
            return False
        if tok == start:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Split:
    """A trajectory cut at ``</think>``; ``think_closed`` is False if it never closed."""

    reasoning_ids: tuple[int, ...]
    content_ids: tuple[int, ...]
    think_closed: bool

    @property
    def reasoning_tokens(self) -> int:
        """Tokens spent thinking; the closing ``</think>`` itself is not counted."""
        return len(self.reasoning_ids)


def split_ids(token_ids: Sequence[int], tokens: ModelTokens, *, thinking_open: bool) -> Split:
    """Split generated ids at the first ``</think>`` (thinking may also open in the output)."""
    ids = tuple(token_ids)
    end = tokens.think_end_id
    if end is None:
        return Split((), ids, False)
    if not thinking_open:
        start = tokens.think_start_id
        if start is None or start not in ids:
            return Split((), ids, False)
        s = ids.index(start)
        if end in ids[s:]:
            e = ids.index(end, s)
            return Split(ids[s + 1 : e], ids[:s] + ids[e + 1 :], True)
        return Split(ids[s + 1 :], ids[:s], False)
    if end in ids:
        e = ids.index(end)
        return Split(ids[:e], ids[e + 1 :], True)
    return Split(ids, (), False)


class IncrementalDecoder:
    """Streams text for a growing list of ids without re-decoding all of it.

    The usual prefix/read-offset scheme: a delta is released only once it no
    longer ends in an incomplete UTF-8 sequence (``\\ufffd``).
    """

    def __init__(self, tokens: ModelTokens) -> None:
        self._tokens = tokens
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, new_ids: Sequence[int]) -> str:
        self._ids.extend(new_ids)
        prefix_text = self._tokens.decode(self._ids[self._prefix : self._read])
        new_text = self._tokens.decode(self._ids[self._prefix :])
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return new_text[len(prefix_text) :]

    def flush(self) -> str:
        """Whatever is still held back, at the end of the stream."""
        prefix_text = self._tokens.decode(self._ids[self._prefix : self._read])
        new_text = self._tokens.decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return new_text[len(prefix_text) :]


@dataclass(frozen=True, slots=True)
class TextDelta:
    reasoning: str = ""
    content: str = ""


class StreamSplitter:
    """Turns one trajectory's id deltas into reasoning and content text deltas."""

    def __init__(self, tokens: ModelTokens, *, thinking_open: bool) -> None:
        self._tokens = tokens
        self._thinking = thinking_open
        self._reasoning = IncrementalDecoder(tokens)
        self._content = IncrementalDecoder(tokens)
        self.reasoning_tokens = 0
        self.completion_tokens = 0
        self.content_tokens = 0  # answer tokens, EOS excluded
        self.think_closed = False

    def push(self, new_ids: Sequence[int]) -> TextDelta:
        reasoning, content = [], []
        start, end = self._tokens.think_start_id, self._tokens.think_end_id
        for tok in new_ids:  # per token: a delta may straddle </think>
            self.completion_tokens += 1
            if self._thinking:
                if tok == end:
                    self._thinking = False
                    self.think_closed = True
                    reasoning.append(self._reasoning.flush())
                    continue
                self.reasoning_tokens += 1
                reasoning.append(self._reasoning.push((tok,)))
            elif tok == start and not self.think_closed and start is not None:
                self._thinking = True
            else:
                if tok not in self._tokens.eos_token_ids:
                    self.content_tokens += 1
                content.append(self._content.push((tok,)))
        return TextDelta("".join(reasoning), "".join(content))

    def flush(self) -> TextDelta:
        if self._thinking:
            return TextDelta(self._reasoning.flush(), "")
        return TextDelta("", self._content.flush())
