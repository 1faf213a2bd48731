"""Splitting a trajectory into thinking and answer, by token ids.

vLLM's output text leaves special tokens such as ``</think>`` out, so the split
is made on ids, and each part is decoded on its own. Token counts are exact.

A think delimiter is a token sequence (``ModelTokens.think_end_ids``; one token for
most models): the split happens at the first *complete* end sequence, and the
delimiter's own tokens are neither reasoning nor content.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.engine import ModelTokens
from kernels.sequence import SequenceMatcher


def thinking_open_after(prompt_ids: Sequence[int], tokens: ModelTokens) -> bool:
    """Whether a prompt leaves thinking open: its last think delimiter is the start one.

    Chat templates in the R1/Qwen3 style end the generation prompt with
    ``<think>``; raw completions prompts may or may not.
    """
    start, end = tokens.think_start_ids, tokens.think_end_ids
    if not start or not end:
        return False
    if len(start) == 1 and len(end) == 1:  # the common case: a reverse scan, no matcher
        for tok in reversed(prompt_ids):
            if tok == end[0]:
                return False
            if tok == start[0]:
                return True
        return False
    opens, closes = SequenceMatcher(start), SequenceMatcher(end)
    s_state = e_state = 0
    is_open = False
    for tok in prompt_ids:
        s_state, e_state = opens.advance(s_state, tok), closes.advance(e_state, tok)
        if s_state == len(opens):
            is_open = True
        elif e_state == len(closes):
            is_open = False
    return is_open


@dataclass(frozen=True, slots=True)
class Split:
    """A trajectory cut at ``</think>``; ``think_closed`` is False if it never closed."""

    reasoning_ids: tuple[int, ...]
    content_ids: tuple[int, ...]
    think_closed: bool
    # Where the ids go on after the end delimiter (-1: thinking never closed): what a call
    # that ran through the end of thinking wrote after it is its answer.
    closed_at: int = -1

    @property
    def reasoning_tokens(self) -> int:
        """Tokens spent thinking; the closing delimiter itself is not counted."""
        return len(self.reasoning_ids)


def split_ids(token_ids: Sequence[int], tokens: ModelTokens, *, thinking_open: bool) -> Split:
    """Split generated ids at the first complete end delimiter (thinking may also open
    in the output, at the first complete start delimiter)."""
    ids = tuple(token_ids)
    end = tokens.think_end_ids
    if not end:
        return Split((), ids, False)
    closes = SequenceMatcher(end)
    if not thinking_open:
        start = tokens.think_start_ids
        if not start:
            return Split((), ids, False)
        opened, _ = SequenceMatcher(start).find(ids)
        if opened < 0:
            return Split((), ids, False)
        s = opened - len(start)
        closed, _ = closes.find(ids, opened)
        if closed >= 0:
            return Split(ids[opened : closed - len(end)], ids[:s] + ids[closed:], True, closed)
        return Split(ids[opened:], ids[:s], False)
    closed, _ = closes.find(ids)
    if closed >= 0:
        return Split(ids[: closed - len(end)], ids[closed:], True, closed)
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
    """Turns one trajectory's id deltas into reasoning and content text deltas.

    Tokens that could be the beginning of a multi-token delimiter are held back until
    the delimiter completes (then they are dropped) or the match fails (then they are
    released to the side they belong to), so no partial delimiter ever reaches the
    content and the counts stay exact. With one-token delimiters nothing is held.
    """

    def __init__(self, tokens: ModelTokens, *, thinking_open: bool) -> None:
        self._tokens = tokens
        self._thinking = thinking_open
        self._reasoning = IncrementalDecoder(tokens)
        self._content = IncrementalDecoder(tokens)
        self._opens = SequenceMatcher(tokens.think_start_ids) if tokens.think_start_ids else None
        self._closes = SequenceMatcher(tokens.think_end_ids) if tokens.think_end_ids else None
        self._state = 0  # partial match of the delimiter looked for now
        self._held: list[int] = []  # its tokens, not yet released
        self.reasoning_tokens = 0
        self.completion_tokens = 0
        self.content_tokens = 0  # answer tokens, EOS excluded
        self.think_closed = False

    def push(self, new_ids: Sequence[int]) -> TextDelta:
        reasoning: list[str] = []
        content: list[str] = []
        for tok in new_ids:  # per token: a delta may straddle </think>
            self.completion_tokens += 1
            if self._thinking:
                if self._closes is None:  # no end delimiter: thinking never closes
                    self._think((tok,), reasoning)
                    continue
                if self._match(self._closes, tok, reasoning, self._think):
                    self._thinking = False
                    self.think_closed = True
                    reasoning.append(self._reasoning.flush())
            elif self._opens is not None and not self.think_closed:
                if self._match(self._opens, tok, content, self._answer):
                    self._thinking = True
            else:
                self._answer((tok,), content)
        return TextDelta("".join(reasoning), "".join(content))

    def _match(
        self,
        matcher: SequenceMatcher,
        tok: int,
        out: list[str],
        release: Callable[[Sequence[int], list[str]], None],
    ) -> bool:
        """Feed ``tok`` to the delimiter match; True when the delimiter completed.

        Whatever can no longer be part of the delimiter is released to ``release``; the
        delimiter's own tokens are dropped.
        """
        self._held.append(tok)
        self._state = matcher.advance(self._state, tok)
        if self._state == len(matcher):
            release(self._held[: -len(matcher)], out)
            self._held.clear()
            self._state = 0
            return True
        keep = len(self._held) - self._state
        if keep:
            release(self._held[:keep], out)
            del self._held[:keep]
        return False

    def _think(self, ids: Sequence[int], out: list[str]) -> None:
        if ids:
            self.reasoning_tokens += len(ids)
            out.append(self._reasoning.push(ids))

    def _answer(self, ids: Sequence[int], out: list[str]) -> None:
        if ids:
            eos = self._tokens.eos_token_ids
            self.content_tokens += sum(1 for t in ids if t not in eos)
            out.append(self._content.push(ids))

    def flush(self) -> TextDelta:
        """At the end of the stream: held tokens were no delimiter after all."""
        held, self._held, self._state = self._held, [], 0
        out: list[str] = []
        if self._thinking:
            self._think(held, out)
            return TextDelta("".join(out) + self._reasoning.flush(), "")
        self._answer(held, out)
        return TextDelta("", "".join(out) + self._content.flush())
