"""Reasoning traces for the testbed task, with the variations the models learn.

A full trace writes one step per line (`3+8=1`); after a step, with probability
`check_prob`, a redundant check line that re-verifies it by the inverse operation
(`check 1-8=3`), so greedy decoding of a model trained at 0.6 checks every step and
overthinks; with probability `merge_prob` two steps share one line (`1-5+7=3`), shorter
and less reliable: with probability `merge_error` its result is a wrong digit, and the
trace goes on from it to a wrong answer. Concise traces lower `check_prob`; cut traces
stop at a random point and are closed by a forced `</think>` and the correct answer
(Elastic Reasoning's budget-constrained training, done as supervised fine-tuning).

Why merged lines err on purpose: a model that learns the task exactly samples at
temperature 1 as well as it decodes greedily (measured: 0.93 of 6-12 operation questions
right with one sample, 1.00 greedy and with a majority of 16), and the testbed needs
sampling errors that voting and allocation can fix, as in large reasoning models. Greedy
decoding never merges (a merge is the 0.15 branch), so greedy accuracy is untouched.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Final

from testbed.task import Question, apply_op
from testbed.tokenizer import THINK_END

_INVERSE: Final = {"+": "-", "-": "+"}


# Share of merged lines whose result is wrong: sampled traces then fail often enough on
# long questions for voting to matter, while merged lines stay right most of the time.
MERGE_ERROR: Final = 0.15


@dataclass(frozen=True, slots=True)
class TraceStyle:
    check_prob: float
    merge_prob: float
    merge_error: float = MERGE_ERROR


FULL: Final = TraceStyle(check_prob=0.6, merge_prob=0.15)
CONCISE: Final = TraceStyle(check_prob=0.0, merge_prob=0.15)
LIGHT: Final = TraceStyle(check_prob=0.15, merge_prob=0.15)
# Every step checked and none merged: what greedy decoding of `base` writes, so training
# on a few of these keeps greedy's longest traces inside the lengths the model has seen.
THOROUGH: Final = TraceStyle(check_prob=1.0, merge_prob=0.0)


@dataclass(frozen=True, slots=True)
class Trace:
    """One assistant completion: thinking text, then `</think>`, then the boxed answer.

    `forced_close` marks a trace cut by a budget: its `</think>` was imposed from outside,
    so training must not teach the model to emit it there. `concluded` is the answer the
    thinking reached when a wrong merged line led it astray (None: the right answer).
    """

    question: Question
    thinking: str
    forced_close: bool = False
    concluded: int | None = None

    @property
    def answer(self) -> int:
        return self.question.answer if self.concluded is None else self.concluded

    @property
    def answer_text(self) -> str:
        return f"\n\\boxed{{{self.answer}}}"

    @property
    def completion(self) -> str:
        """Everything the model writes after the generation prompt, EOS excluded."""
        return f"{self.thinking}{THINK_END}{self.answer_text}"


def step_line(left: int, op: str, right: int) -> str:
    return f"{left}{op}{right}={apply_op(left, op, right)}"


def check_line(left: int, op: str, right: int) -> str:
    # Re-verify `left op right = result` by undoing the operation: `result inv right = left`.
    return f"check {apply_op(left, op, right)}{_INVERSE[op]}{right}={left}"


def thinking_lines(
    question: Question, rng: random.Random, style: TraceStyle
) -> tuple[list[str], int]:
    """The lines of one trace and the value they end at (its answer)."""
    expr = question.expr
    operations = [(expr[i], int(expr[i + 1])) for i in range(1, len(expr), 2)]
    value = int(expr[0])
    lines: list[str] = []
    i = 0
    while i < len(operations):
        op, right = operations[i]
        if i + 1 < len(operations) and rng.random() < style.merge_prob:
            op2, right2 = operations[i + 1]
            middle = apply_op(value, op, right)
            result = apply_op(middle, op2, right2)
            if style.merge_error > 0.0 and rng.random() < style.merge_error:
                result = (result + rng.randint(1, 9)) % 10  # any of the nine wrong digits
            lines.append(f"{value}{op}{right}{op2}{right2}={result}")
            value = result
            i += 2
            continue
        lines.append(step_line(value, op, right))
        if rng.random() < style.check_prob:
            lines.append(check_line(value, op, right))
        value = apply_op(value, op, right)
        i += 1
    return lines, value


def make_trace(question: Question, rng: random.Random, style: TraceStyle = FULL) -> Trace:
    lines, value = thinking_lines(question, rng, style)
    return Trace(
        question=question,
        thinking="".join(line + "\n" for line in lines),
        concluded=None if value == question.answer else value,
    )


def cut_trace(trace: Trace, rng: random.Random) -> Trace:
    """`trace` stopped after a uniformly random number of thinking characters (= tokens).

    The answer stays correct: the model learns to answer from whatever it has computed,
    which is right when the cut left nothing undone and a guess otherwise.
    """
    keep = rng.randint(0, len(trace.thinking))
    return Trace(question=trace.question, thinking=trace.thinking[:keep], forced_close=True)


def count_lines(thinking: str) -> dict[str, int]:
    """Lines by kind (`step`, `check`, `merged`, `other`) in a thinking text."""
    counts = {"step": 0, "check": 0, "merged": 0, "other": 0}
    for line in thinking.splitlines():
        if not line:
            continue
        kind = classify_line(line)
        counts[kind] += 1
    return counts


_COMPUTE_RE: Final = re.compile(r"[0-9](?:[+-][0-9])+=[0-9]")


def classify_line(line: str) -> str:
    """`step` (`3+8=1`), `check` (`check 1-8=3`), `merged` (`1-5+7=3`) or `other`."""
    is_check = line.startswith("check ")
    body = line.removeprefix("check ")
    if not _COMPUTE_RE.fullmatch(body):
        return "other"
    ops = sum(1 for ch in body if ch in "+-")
    if is_check:
        return "check" if ops == 1 else "other"
    return {1: "step", 2: "merged"}.get(ops, "other")


def line_is_correct(line: str) -> bool:
    """Whether a step, check or merged line states true arithmetic mod 10."""
    body = line.removeprefix("check ")
    if not _COMPUTE_RE.fullmatch(body):
        return False
    left, _, result = body.partition("=")
    value = int(left[0])
    for i in range(1, len(left), 2):
        value = apply_op(value, left[i], int(left[i + 1]))
    return value == int(result)
