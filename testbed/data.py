"""Training examples for each variant: token ids plus per-token loss weights."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal

from testbed.task import MAX_OPS, MIN_OPS, Question, random_expr, split_of
from testbed.tokenizer import CharCodec, chat_prompt
from testbed.traces import (
    CONCISE,
    FULL,
    LIGHT,
    THOROUGH,
    Trace,
    classify_line,
    cut_trace,
    make_trace,
)

Variant = Literal["base", "elastic", "tools"]
VARIANTS: Final[tuple[Variant, ...]] = ("base", "elastic", "tools")


@dataclass(frozen=True, slots=True)
class Example:
    """A prompt+completion sequence with per-token loss weights (0 = not learned)."""

    ids: tuple[int, ...]
    weights: tuple[float, ...]
    merged_positions: tuple[int, ...] = ()  # token positions of merged lines' result digits
    step_positions: tuple[int, ...] = ()  # token positions of step lines' result digits
    operand_positions: tuple[int, ...] = ()  # operators and operands copied from the question


def result_offsets(thinking: str, kind: str) -> list[int]:
    """Character offsets of the result digit of every complete line of `kind` in `thinking`.

    Characters are tokens, so these are also token offsets into the thinking ids.
    """
    offsets: list[int] = []
    start = 0
    for line in thinking.split("\n"):
        if classify_line(line) == kind:
            offsets.append(start + len(line) - 1)
        start += len(line) + 1
    return offsets


def operand_offsets(thinking: str) -> list[int]:
    """Offsets of the operators and operands that step and merged lines copy from the question.

    `3+8=1` copies `+8`, `1-5+7=3` copies `-5+7`: finding them (the next operations of the
    question, whatever check lines came between) is the skill a fresh model learns last.
    """
    offsets: list[int] = []
    start = 0
    for line in thinking.split("\n"):
        kind = classify_line(line)
        if kind in ("step", "merged"):
            copied = 2 if kind == "step" else 4
            offsets.extend(range(start + 1, start + 1 + copied))
        start += len(line) + 1
    return offsets


def merged_result_offsets(thinking: str) -> list[int]:
    """Offsets of the result digit of every complete merged line (`1-5+7=3`)."""
    return result_offsets(thinking, "merged")


def encode_trace(
    codec: CharCodec, trace: Trace, *, merge_weight: float = 1.0, step_weight: float = 1.0
) -> Example:
    """Prompt tokens get weight 0 (the model never writes them); so does a forced `</think>`.

    `merge_weight` scales the result digit of merged lines: two operations in one token is
    the one step a small model gets wrong, and a plain loss spends almost all of its
    gradient on the easy copy tokens around it. `step_weight` does the same for step lines'
    result digit (the arithmetic phase: it leaves its plateau far sooner).
    """
    prompt = codec.encode(chat_prompt(trace.question.prompt))
    thinking = codec.encode(trace.thinking)
    answer = codec.encode(trace.answer_text)
    close_weight = 0.0 if trace.forced_close else 1.0
    ids = [*prompt, *thinking, codec.think_end_id, *answer, codec.eos_id]
    thinking_weights = [1.0] * len(thinking)
    offsets = merged_result_offsets(trace.thinking)
    for offset in offsets:
        thinking_weights[offset] = merge_weight
    step_offsets = result_offsets(trace.thinking, "step")
    for offset in step_offsets:
        thinking_weights[offset] = step_weight
    weights = [0.0] * len(prompt) + thinking_weights + [close_weight] + [1.0] * (len(answer) + 1)
    return Example(
        ids=tuple(ids),
        weights=tuple(weights),
        merged_positions=tuple(len(prompt) + o for o in offsets),
        step_positions=tuple(len(prompt) + o for o in step_offsets),
        operand_positions=tuple(len(prompt) + o for o in operand_offsets(trace.thinking)),
    )


def train_question(
    rng: random.Random, *, min_ops: int = MIN_OPS, max_ops: int = MAX_OPS, small_share: float = 0.0
) -> Question:
    while True:
        expr = random_expr(rng, rng.randint(min_ops, max_ops), small_share=small_share)
        if split_of(expr) == "train":
            return Question.from_expr(expr)


def variant_trace(
    variant: Variant,
    rng: random.Random,
    *,
    thorough_share: float = 0.0,
    small_share: float = 0.0,
    cut_share: float = 0.0,
) -> Trace:
    """One training trace drawn from the variant's mixture.

    `elastic` is mostly concise (no or few checks) so that greedy decoding stops checking,
    a quarter cut traces so it always answers after a forced `</think>`, and some full
    traces so it keeps the step-by-step format. `base` may get a share of cut full traces
    too (`cut_share`): without them it answered after a forced `</think>` on as few as
    23 of 48 hard questions (cut mid-line, it went on stepping inside `\boxed{`), while
    reasoning models answer, which budget forcing relies on.
    """
    question = train_question(rng, small_share=small_share)
    if variant == "base":
        # No draw at share 0: the streams of earlier phases stay what they were.
        if thorough_share > 0.0 and rng.random() < thorough_share:
            return make_trace(question, rng, THOROUGH)
        if cut_share > 0.0 and rng.random() < cut_share:
            return cut_trace(make_trace(question, rng, FULL), rng)
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


def example_stream(
    codec: CharCodec,
    variant: Variant,
    *,
    seed: int,
    merge_weight: float = 1.0,
    step_weight: float = 1.0,
    thorough_share: float = 0.0,
    small_share: float = 0.0,
    cut_share: float = 0.0,
) -> Iterator[Example]:
    if variant == "tools":  # its own mixture, prompts through its own template
        from testbed.tools import tool_stream

        yield from tool_stream(codec, seed=seed)
        return
    rng = random.Random(f"{variant}:{seed}")
    while True:
        trace = variant_trace(
            variant,
            rng,
            thorough_share=thorough_share,
            small_share=small_share,
            cut_share=cut_share,
        )
        yield encode_trace(codec, trace, merge_weight=merge_weight, step_weight=step_weight)
