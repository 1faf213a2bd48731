"""Think delimiters that are token sequences: split, prompt state and live streaming.

A character-level stand-in tokenizer makes ``<think>``/``</think>`` seven and eight
tokens, as a BPE model without them in its vocab splits them into several.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from core.engine import ModelTokens
from kernels.sequence import SequenceMatcher, find_sequence
from strategies.reasoning import StreamSplitter, split_ids, thinking_open_after

EOS = 1


@dataclass
class CharTokens:
    """``ModelTokens`` where every character is a token (id = code point)."""

    start: str = "<think>"
    end: str = "</think>"
    eos_token_ids: tuple[int, ...] = (EOS,)
    think_start_ids: tuple[int, ...] = field(init=False)
    think_end_ids: tuple[int, ...] = field(init=False)
    think_start_id: int | None = None
    think_end_id: int | None = None
    vocab_size: int = 0x110000  # every code point

    def __post_init__(self) -> None:
        self.think_start_ids = tuple(self.encode(self.start))
        self.think_end_ids = tuple(self.encode(self.end))

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(chr(t) for t in token_ids if t != EOS)

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id])

    def render_chat(self, messages: Sequence[Mapping[str, object]]) -> list[int]:
        return self.encode(f"{messages[-1]['content']}\n<think>")


TOKENS = CharTokens()


def test_stand_in_is_model_tokens() -> None:
    assert isinstance(TOKENS, ModelTokens)
    assert len(TOKENS.think_end_ids) == 8 and TOKENS.think_end_id is None


@pytest.mark.parametrize(
    ("text", "reasoning", "content", "closed"),
    [
        ("abc</think>xyz", "abc", "xyz", True),
        ("a</thin b</think>c</think>d", "a</thin b", "c</think>d", True),  # first complete one
        ("a<</think>b", "a<", "b", True),  # a restart inside the partial match
        ("never closes </thi", "never closes </thi", "", False),
        ("</think>", "", "", True),
    ],
)
def test_split_at_the_first_complete_end_sequence(
    text: str, reasoning: str, content: str, closed: bool
) -> None:
    split = split_ids(TOKENS.encode(text), TOKENS, thinking_open=True)
    assert TOKENS.decode(split.reasoning_ids) == reasoning
    assert TOKENS.decode(split.content_ids) == content
    assert split.think_closed is closed
    assert split.reasoning_tokens == len(reasoning)  # the delimiter is not counted


def test_split_when_thinking_opens_in_the_output() -> None:
    ids = TOKENS.encode("pre<think>ab</think>c")
    split = split_ids(ids, TOKENS, thinking_open=False)
    assert (TOKENS.decode(split.reasoning_ids), TOKENS.decode(split.content_ids)) == ("ab", "prec")
    plain = split_ids(TOKENS.encode("<thin no"), TOKENS, thinking_open=False)
    assert plain.reasoning_ids == () and TOKENS.decode(plain.content_ids) == "<thin no"


@pytest.mark.parametrize(
    ("prompt", "is_open"),
    [
        ("q\n<think>", True),
        ("q\n<think></think>", False),
        ("q\n<think>x</thin", True),  # a partial end is no end
        ("q", False),
        ("<think></think> again <think>", True),
    ],
)
def test_thinking_open_after_sequences(prompt: str, is_open: bool) -> None:
    assert thinking_open_after(TOKENS.encode(prompt), TOKENS) is is_open


def _stream(
    ids: list[int], cuts: list[int], thinking_open: bool
) -> tuple[list[str], list[str], StreamSplitter]:
    splitter = StreamSplitter(TOKENS, thinking_open=thinking_open)
    reasoning, content = [], []
    bounds = [0, *cuts, len(ids)]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        delta = splitter.push(ids[lo:hi])
        reasoning.append(delta.reasoning)
        content.append(delta.content)
    tail = splitter.flush()
    reasoning.append(tail.reasoning)
    content.append(tail.content)
    return reasoning, content, splitter


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(
    ("text", "thinking_open"),
    [
        ("think </th more </think>the answer</think>", True),
        ("pre<th<think>in </think>post", False),
        ("cut mid delimiter </thi", True),
    ],
)
def test_stream_splitter_matches_split_and_never_leaks(
    seed: int, text: str, thinking_open: bool
) -> None:
    ids = [*TOKENS.encode(text), EOS]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(ids)), rng.randint(0, len(ids) - 1)))
    reasoning, content, splitter = _stream(ids, cuts, thinking_open)
    split = split_ids(ids, TOKENS, thinking_open=thinking_open)
    assert "".join(reasoning) == TOKENS.decode(split.reasoning_ids)
    assert "".join(content) == TOKENS.decode(split.content_ids)
    assert splitter.reasoning_tokens == split.reasoning_tokens
    assert splitter.completion_tokens == len(ids)
    assert splitter.content_tokens == len([t for t in split.content_ids if t != EOS])
    assert splitter.think_closed is split.think_closed
    # Deltas only append, so equal totals mean no partial delimiter was ever sent to a
    # side it does not belong to (it could not be taken back).


def test_held_tokens_are_released_when_the_match_fails() -> None:
    splitter = StreamSplitter(TOKENS, thinking_open=True)
    assert splitter.push(TOKENS.encode("ab</th")).reasoning == "ab"  # "</th" held back
    assert splitter.reasoning_tokens == 2
    assert splitter.push(TOKENS.encode("e")).reasoning == "</the"  # diverged: released
    assert splitter.reasoning_tokens == 7
    delta = splitter.push(TOKENS.encode("</think>ok"))
    assert (delta.reasoning, delta.content) == ("", "ok")
    assert splitter.reasoning_tokens == 7 and splitter.think_closed


def test_single_token_delimiters_hold_nothing() -> None:
    tokens = CharTokens(start="{", end="}")
    splitter = StreamSplitter(tokens, thinking_open=True)
    assert splitter.push(tokens.encode("ab")).reasoning == "ab"
    delta = splitter.push(tokens.encode("}c"))
    assert (delta.reasoning, delta.content) == ("", "c")
    assert splitter.reasoning_tokens == 2 and splitter.content_tokens == 1


def test_matcher_falls_back_to_the_longest_prefix() -> None:
    matcher = SequenceMatcher((1, 1, 2))
    assert matcher.find([1, 1, 1, 2]) == (4, 3)
    assert matcher.find([1, 1, 3, 1]) == (-1, 1)
    assert find_sequence([5, 1, 2, 1, 2, 3], (1, 2, 3)) == 3
    assert find_sequence([5], (5,)) == 0 and find_sequence([], (5,)) == -1
    with pytest.raises(ValueError):
        SequenceMatcher(())


def test_every_delta_with_tokens_is_an_event_even_without_text() -> None:
    """A held delimiter token or an EOS has no text yet; the stream still gets an event
    for it (an empty chunk), as vLLM's server sends one per engine output."""
    from core.engine import SampleDelta
    from strategies.trajectories import TrajectorySet

    trajectories = TrajectorySet(TOKENS, thinking_open=True)
    ids = TOKENS.encode("ab</think>c")
    events = [trajectories.push(SampleDelta(index=0, token_ids=(t,))) for t in ids]
    events.append(trajectories.push(SampleDelta(index=0, token_ids=(EOS,))))
    assert all(e is not None for e in events)
    texts = [(e.reasoning, e.content) for e in events if e is not None]
    assert texts[:2] == [("a", ""), ("b", "")]
    assert texts[2:10] == [("", "")] * 8  # the eight tokens of </think>: held, dropped
    assert texts[10:] == [("", "c"), ("", "")]  # then the answer and its EOS
    assert [e.completion_tokens for e in events if e is not None] == list(range(1, 13))
    assert trajectories.push(SampleDelta(index=0, token_ids=())) is None  # nothing came
