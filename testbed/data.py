"""Training examples for each variant: token ids plus per-token loss weights."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from testbed.task import MAX_OPS, MIN_OPS, Question, random_expr, split_of
from testbed.tokenizer import CharCodec, chat_prompt
from testbed.traces import CONCISE, FULL, LIGHT, Trace, cut_trace, make_trace

Variant = Literal["base", "elastic"]
VARIANTS: Final[tuple[Variant, ...]] = ("base", "elastic")


@dataclass(frozen=True, slots=True)
class Example:
    """A prompt+completion sequence; the loss counts only tokens with weight 1."""

    ids: tuple[int, ...]
    weights: tuple[float, ...]


def encode_trace(codec: CharCodec, trace: Trace) -> Example:
    """Prompt tokens get weight 0 (the model never writes them); so does a forced `</think>`."""
    prompt = codec.encode(chat_prompt(trace.question.prompt))
    thinking = codec.encode(trace.thinking)
    answer = codec.encode(trace.answer_text)
    close_weight = 0.0 if trace.forced_close else 1.0
    ids = [*prompt, *thinking, codec.think_end_id, *answer, codec.eos_id]
    weights = (
        [0.0] * len(prompt) + [1.0] * len(thinking) + [close_weight] + [1.0] * (len(answer) + 1)
    )
    return Example(ids=tuple(ids), weights=tuple(weights))


def train_question(
    rng: random.Random, *, min_ops: int = MIN_OPS, max_ops: int = MAX_OPS
) -> Question:
    while True:
        expr = random_expr(rng, rng.randint(min_ops, max_ops))
        if split_of(expr) == "train":
            return Question.from_expr(expr)


def variant_trace(variant: Variant, rng: random.Random) -> Trace:
    """One training trace drawn from the variant's mixture.

    `elastic` is mostly concise (no or few checks) so that greedy decoding stops checking,
    a quarter cut traces so it always answers after a forced `</think>`, and some full
    traces so it keeps the step-by-step format.
    """
    question = train_question(rng)
    if variant == "base":
        return make_trace(question, rng, FULL)
    draw = rng.random()
    if draw < 0.45:
        return make_trace(question, rng, CONCISE)
    if draw < 0.60:
        return make_trace(question, rng, LIGHT)
    if draw < 0.85:
        source = FULL if rng.random() < 0.5 else CONCISE
        return cut_trace(make_trace(question, rng, source), rng)
    return make_trace(question, rng, FULL)


def example_stream(codec: CharCodec, variant: Variant, *, seed: int) -> Iterator[Example]:
    rng = random.Random(f"{variant}:{seed}")
    while True:
        yield encode_trace(codec, variant_trace(variant, rng))
