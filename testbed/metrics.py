"""Pure metrics over completions: accuracy by difficulty, votes, line statistics, AUROC."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat

from testbed.engine import Completion
from testbed.traces import classify_line, line_is_correct


def majority(answers: Iterable[int | None], weights: Iterable[float] | None = None) -> int | None:
    """Most frequent non-missing answer, or with ``weights`` (one per answer) the one of
    largest summed weight; ties go to the one seen first."""
    totals: dict[int, float] = {}
    # Not strict: without weights the second iterable is an endless repeat(1.0).
    ones_or_weights = repeat(1.0) if weights is None else weights
    for answer, weight in zip(answers, ones_or_weights, strict=False):
        if answer is not None:
            totals[answer] = totals.get(answer, 0.0) + weight
    return max(totals, key=totals.__getitem__) if totals else None


def by_ops(values: Iterable[tuple[int, float]]) -> dict[int, float]:
    sums: dict[int, list[float]] = {}
    for ops, v in values:
        sums.setdefault(ops, []).append(v)
    return {ops: sum(vs) / len(vs) for ops, vs in sorted(sums.items())}


def accuracy_by_ops(completions: Sequence[Completion]) -> dict[int, float]:
    return by_ops((c.question.ops, float(c.correct)) for c in completions)


def thinking_by_ops(completions: Sequence[Completion]) -> dict[int, float]:
    return by_ops((c.question.ops, float(c.thinking_tokens)) for c in completions)


def range_mean(table: dict[int, float], lo: int, hi: int) -> float:
    vals = [v for k, v in table.items() if lo <= k <= hi]
    return sum(vals) / len(vals) if vals else float("nan")


@dataclass(frozen=True, slots=True)
class LineStats:
    step_lines: int
    check_lines: int
    merged_lines: int
    other_lines: int
    merged_correct: int
    step_correct: int

    @property
    def check_rate(self) -> float:
        """Checks per single-step line (training rate: 0.6 for `base`)."""
        return self.check_lines / max(1, self.step_lines)

    @property
    def merge_rate(self) -> float:
        """Merged lines per computing line (step or merged)."""
        return self.merged_lines / max(1, self.step_lines + self.merged_lines)

    def as_dict(self) -> dict[str, float]:
        return {
            "step_lines": self.step_lines,
            "check_lines": self.check_lines,
            "merged_lines": self.merged_lines,
            "other_lines": self.other_lines,
            "check_rate": round(self.check_rate, 4),
            "merge_rate": round(self.merge_rate, 4),
            "merged_line_accuracy": round(self.merged_correct / max(1, self.merged_lines), 4),
            "step_line_accuracy": round(self.step_correct / max(1, self.step_lines), 4),
        }


def line_stats(completions: Iterable[Completion]) -> LineStats:
    kinds: Counter[str] = Counter()
    merged_ok = 0
    step_ok = 0
    for c in completions:
        for line in c.thinking.splitlines():
            if not line:
                continue
            kind = classify_line(line)
            kinds[kind] += 1
            if kind == "merged" and line_is_correct(line):
                merged_ok += 1
            if kind == "step" and line_is_correct(line):
                step_ok += 1
    return LineStats(
        step_lines=kinds["step"],
        check_lines=kinds["check"],
        merged_lines=kinds["merged"],
        other_lines=kinds["other"],
        merged_correct=merged_ok,
        step_correct=step_ok,
    )


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Probability that a random positive outscores a random negative (ties count half)."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return float("nan")
    ranked = sorted([(s, 1) for s in pos] + [(s, 0) for s in neg])
    # Mann-Whitney U with average ranks for ties.
    rank_sum = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        avg_rank = (i + 1 + j) / 2
        rank_sum += avg_rank * sum(1 for k in range(i, j) if ranked[k][1] == 1)
        i = j
    u = rank_sum - len(pos) * (len(pos) + 1) / 2
    return u / (len(pos) * len(neg))
