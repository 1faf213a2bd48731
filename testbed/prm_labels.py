"""Step labels of the process reward model, from exact arithmetic on a sampled trajectory.

A step is one thinking line (the step tag, the newline token, closes it). Walking the
lines in order with the question's true running value:

* a computing line (`3+8=1`, or a merged `1-5+7=3`) consumes the question's next one or
  two operations; it is right when its operators and operands are exactly those next
  operations and the value it states is the true running value after them. Its left
  operand is not checked on its own: the state the trace carries on from is the stated
  value, and a wrong left operand that still lands on the true value is harmless to
  every later step;
* a `check` line (`check 1-8=3`) consumes nothing; it is right when it is true
  arithmetic and re-verifies the last computing line before it: it starts from that
  line's stated value and undoes that line's last operation (inverse operator, same
  operand), so it lands on the value before it. A check with no computing line before it
  is wrong;
* anything else (`other` lines, empty lines, a computing line past the question's last
  operation) is wrong;
* every step after the first wrong one is wrong (Math-Shepherd / PRM800K hard labels).

The thinking's end (the tag after `</think>`) gets its own label: right when every line
was right and the lines consumed all the question's operations, i.e. the thinking reached
the true answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from testbed.task import Question, apply_op
from testbed.traces import classify_line, line_is_correct

_INVERSE: Final = {"+": "-", "-": "+"}


@dataclass(frozen=True, slots=True)
class _Compute:
    ops: tuple[tuple[str, int], ...]
    result: int


def _parse_compute(line: str) -> _Compute:
    left, _, result = line.partition("=")
    ops = tuple((left[i], int(left[i + 1])) for i in range(1, len(left), 2))
    return _Compute(ops=ops, result=int(result))


def question_ops(question: Question) -> list[tuple[str, int]]:
    expr = question.expr
    return [(expr[i], int(expr[i + 1])) for i in range(1, len(expr), 2)]


@dataclass(frozen=True, slots=True)
class StepLabels:
    """Per thinking line (in order) whether it is right, and whether the thinking as a
    whole reached the true answer (every line right, every operation consumed)."""

    lines: tuple[bool, ...]
    complete: bool


@dataclass(frozen=True, slots=True)
class _Walked:
    """One line of the walk: whether every line before it was right, the operations
    consumed before it, and whether it (and every line before it) is right."""

    line: str
    ok_before: bool
    consumed_before: int
    ok: bool


def _walk(question: Question, lines: list[str]) -> tuple[list[_Walked], int]:
    """Each line's place in the exact walk, and the operations consumed at the end."""
    ops = question_ops(question)
    value = int(question.expr[0])
    consumed = 0
    previous: _Compute | None = None
    ok = True
    out: list[_Walked] = []
    for line in lines:
        before, consumed_before = ok, consumed
        if ok:
            ok, value, consumed, previous = _step(line, ops, value, consumed, previous)
        out.append(_Walked(line=line, ok_before=before, consumed_before=consumed_before, ok=ok))
    return out, consumed


def step_labels(question: Question, lines: list[str]) -> StepLabels:
    """Labels of ``lines`` (the thinking split at newlines, without the newlines)."""
    walked, consumed = _walk(question, lines)
    ok = all(w.ok for w in walked)
    return StepLabels(
        lines=tuple(w.ok for w in walked),
        complete=ok and consumed == len(question_ops(question)),
    )


def expected_ops(question: Question, lines: list[str]) -> tuple[tuple[str, int] | None, ...]:
    """Per line, the question's operation that a computing line must end with (the last
    of the ones it should consume, by how many it writes), while every line before it
    is right; None for other lines, lines after the first wrong one, and lines that write
    more operations than the question has left. An exact target from the question alone,
    whatever the line wrote: what a PRM needs to see a skipped or repeated operation."""
    ops = question_ops(question)
    out: list[tuple[str, int] | None] = []
    for w in _walk(question, lines)[0]:
        target: tuple[str, int] | None = None
        if w.ok_before and classify_line(w.line) in ("step", "merged"):
            k = len(_parse_compute(w.line).ops)
            if k > 0 and w.consumed_before + k <= len(ops):
                target = ops[w.consumed_before + k - 1]
        out.append(target)
    return tuple(out)


def remaining_ops(
    question: Question, lines: list[str]
) -> tuple[tuple[int | None, ...], int | None]:
    """Per line, how many of the question's operations are left after it while it and
    every line before it are right (None after the first wrong line), and the same at the
    thinking's end. An exact target from the question alone: 0 at the end is what the
    end tag's label asks (with every line right), so a read-out of it teaches a PRM to
    see a thinking closed before its last operation."""
    walked, consumed = _walk(question, lines)
    total = len(question_ops(question))
    # What a line consumed shows as the next line's count before it (the last: the end's).
    after = [w.consumed_before for w in walked[1:]] + [consumed]
    out = [total - done if w.ok else None for w, done in zip(walked, after, strict=False)]
    end = total - consumed if all(w.ok for w in walked) else None
    return tuple(out), end


def _step(
    line: str,
    ops: list[tuple[str, int]],
    value: int,
    consumed: int,
    previous: _Compute | None,
) -> tuple[bool, int, int, _Compute | None]:
    """(right, running value, operations consumed, last computing line) after ``line``."""
    kind = classify_line(line)
    if kind in ("step", "merged"):
        line_c = _parse_compute(line)
        k = len(line_c.ops)
        if tuple(ops[consumed : consumed + k]) != line_c.ops:
            return False, value, consumed, previous
        truth = value
        for op, right in line_c.ops:
            truth = apply_op(truth, op, right)
        return line_c.result == truth, truth, consumed + k, line_c
    if kind == "check":
        if previous is None or not line_is_correct(line):
            return False, value, consumed, previous
        body = line.removeprefix("check ")
        start, op, operand = int(body[0]), body[1], int(body[2])
        last_op, last_right = previous.ops[-1]
        consistent = start == previous.result and op == _INVERSE[last_op] and operand == last_right
        return consistent, value, consumed, previous
    return False, value, consumed, previous
