"""The testbed task: chains of one-digit additions and subtractions modulo 10.

The user message is fixed (`Compute 3+8-5+7 mod 10.`); other packages parse it, so its
format must not drift. Each expression belongs to exactly one split, chosen by a stable
hash of its text, so a test question can never leak into training data.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Final, Literal

Split = Literal["train", "validation", "test"]
SPLITS: Final[tuple[Split, ...]] = ("train", "validation", "test")
MIN_OPS: Final = 1
MAX_OPS: Final = 12
MODULUS: Final = 10

# Share of the hash space per split (percent); the rest is train.
_TEST_PCT: Final = 10
_VALIDATION_PCT: Final = 10

_PROMPT_RE: Final = re.compile(r"Compute\s+([0-9](?:[+-][0-9])+)\s+mod\s+10\.")


@dataclass(frozen=True, slots=True)
class Question:
    expr: str
    ops: int
    answer: int

    @property
    def prompt(self) -> str:
        """The user message, exactly as the model was trained on it."""
        return f"Compute {self.expr} mod {MODULUS}."

    @classmethod
    def from_expr(cls, expr: str) -> Question:
        return cls(expr=expr, ops=count_ops(expr), answer=evaluate(expr))


def count_ops(expr: str) -> int:
    return sum(1 for ch in expr if ch in "+-")


def evaluate(expr: str) -> int:
    """Left-to-right value of `expr` modulo 10 (also the value of every prefix step)."""
    if not re.fullmatch(r"[0-9](?:[+-][0-9])*", expr):
        raise ValueError(f"not a digit chain: {expr!r}")
    value = int(expr[0])
    for i in range(1, len(expr), 2):
        value = apply_op(value, expr[i], int(expr[i + 1]))
    return value


def apply_op(left: int, op: str, right: int) -> int:
    if op == "+":
        return (left + right) % MODULUS
    if op == "-":
        return (left - right) % MODULUS
    raise ValueError(f"unknown operator {op!r}")


def parse_prompt(text: str) -> str:
    """The expression inside a user message (raises ValueError if there is none)."""
    match = _PROMPT_RE.search(text)
    if match is None:
        raise ValueError(f"not a testbed prompt: {text!r}")
    return match.group(1)


def split_of(expr: str) -> Split:
    """The split an expression belongs to: a pure function of its text (stable across runs)."""
    bucket = int.from_bytes(hashlib.blake2b(expr.encode(), digest_size=8).digest(), "big") % 100
    if bucket < _TEST_PCT:
        return "test"
    if bucket < _TEST_PCT + _VALIDATION_PCT:
        return "validation"
    return "train"


# Right operands of the arithmetic phase's "small" operations (0 twice: `a+0=a` is a copy).
SMALL_OPERANDS: Final = (0, 0, 1, 2)


def random_expr(rng: random.Random, ops: int, *, small_share: float = 0.0) -> str:
    """`ops` operations on uniform digits; a `small_share` of right operands from 0-2.

    Training only: with uniform operands neither operand alone says anything about the
    result (mod 10), so a fresh model gets no first-order signal to attend to them and
    sits on a plateau for a seed-dependent time; small operands give it one.
    """
    parts = [str(rng.randrange(10))]
    for _ in range(ops):
        parts.append(rng.choice("+-"))
        if small_share > 0.0 and rng.random() < small_share:
            parts.append(str(rng.choice(SMALL_OPERANDS)))
        else:
            parts.append(str(rng.randrange(10)))
    return "".join(parts)


def make_questions(
    split: str, n: int, *, seed: int, min_ops: int = MIN_OPS, max_ops: int = MAX_OPS
) -> list[Question]:
    """`n` questions of `split`, difficulty uniform in [min_ops, max_ops], deterministic in seed.

    Questions may repeat (one-operation chains have only 200 expressions in all).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if not MIN_OPS <= min_ops <= max_ops:
        raise ValueError(f"bad difficulty range [{min_ops}, {max_ops}]")
    # Mix the split name into the seed so the three splits do not share a random stream.
    rng = random.Random(f"{split}:{seed}")
    out: list[Question] = []
    while len(out) < n:
        ops = rng.randint(min_ops, max_ops)
        expr = random_expr(rng, ops)
        if split_of(expr) == split:
            out.append(Question.from_expr(expr))
    return out


def parse_answer_for_eval(text: str) -> int | None:
    """Testbed-only answer reader: the digit in the last `\\boxed{d}` of `text`.

    The gateway's strategies use math-verify; this exists so that training and evaluation
    of the testbed do not depend on them.
    """
    found = re.findall(r"\\boxed\{\s*([0-9])\s*\}", text)
    return int(found[-1]) if found else None
