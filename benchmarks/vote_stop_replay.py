"""``thinkgate bench vote-stop-replay``: the tree's vote stop replayed on plain samples.

A live tree benchmark moves by several points between runs; choosing between stop rules
on it needs hundreds of questions per rule. This replays the rules instead on samples
already drawn (``benchmarks.tree_lengths``'s JSON: per question, each sample's thinking
length, whether it is right, and its answer), many times over with the samples dealt in
a different order each time, so that rules are compared on the very same samples.

The model of a tree it replays: the leaves of a wave start together and a leaf of
``L`` thinking tokens finishes at segment ``ceil(L / segment)`` of its wave (the testbed's
tokens are characters); the vote is checked after each segment on every leaf finished by
then, as ``strategies.tree.vote`` checks it; the next wave starts once the current one
has finished or its leaves to come could not settle the vote. It leaves out what sharing
prefixes saves (the same for every rule) and the answers' own tokens, so its tokens are
the leaves' thinking up to the stop, its rounds the segments to the stop.

    thinkgate bench vote-stop-replay --samples a.json [--samples b.json] [--n 16]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.out_paths import beside, results_of
from benchmarks.servers import machine
from strategies.tree.vote import lead_probability

RESULTS = results_of("vote_stop_replay")
Sample = tuple[int, bool, str | None]


@dataclass(frozen=True, slots=True)
class Rule:
    """One vote-stop configuration: waves of ``wave`` leaves (N or more: one wave), the
    ``likely`` rule at ``p``, and no stop before ``min_answered`` leaves have answered."""

    label: str
    wave: int
    p: float
    min_answered: int = 0
    stop: bool = True


@dataclass(frozen=True, slots=True)
class Outcome:
    right: bool
    tokens: int
    rounds: int
    answered: int = 0  # leaves answered when the vote was taken
    answer: str | None = None


def _leader(counts: Counter[str]) -> tuple[int, int]:
    top = counts.most_common(2)
    return (top[0][1] if top else 0), (top[1][1] if len(top) > 1 else 0)


def _settles(counts: Counter[str], to_come: int, p: float, joining: int = 0) -> bool:
    a, b = _leader(counts)
    a += joining
    if a - b > to_come:
        return True
    return a + b > 0 and lead_probability(a, b) >= p


def replay(samples: Sequence[Sample], rule: Rule, segment: int) -> Outcome:
    """One tree's vote on ``samples`` (dealt in the order given) under ``rule``."""
    n = len(samples)
    right_of = {s[2]: s[1] for s in samples if s[2] is not None}
    waves = [samples[i : i + rule.wave] for i in range(0, n, rule.wave)]
    counts: Counter[str] = Counter()
    answered = 0
    first_at: dict[str, int] = {}  # ties go to the answer that came first
    tokens = 0
    clock = 0  # segments drawn so far
    for k, wave in enumerate(waves):
        ends = [max(1, math.ceil(s[0] / segment)) for s in wave]
        settled_at = None
        started = clock
        pending = sorted(range(len(wave)), key=lambda i: ends[i])
        last_k = k == len(waves) - 1
        for seg in range(1, max(ends) + 1):
            while pending and ends[pending[0]] == seg:
                s = wave[pending.pop(0)]
                answered += 1
                if s[2] is not None:
                    counts[s[2]] += 1
                    first_at.setdefault(s[2], clock + seg)
            if (
                rule.stop
                and answered >= rule.min_answered
                and counts
                and _settles(counts, n - answered, rule.p)
            ):
                settled_at = seg
                break
            # the next wave starts once this one's leaves to come could not settle it
            if (
                not last_k
                and pending
                and rule.stop
                and not _settles(counts, n - answered - len(pending), rule.p, len(pending))
            ):
                # the rest of this wave finishes beside the next wave; replay it there
                rest = [wave[i] for i in pending]
                shift = seg
                waves[k + 1] = [(s[0] - segment * shift, s[1], s[2]) for s in rest] + list(
                    waves[k + 1]
                )
                # this wave's tokens so far; the rest's remaining ones count in the next
                tokens += sum(min(s[0], segment * seg) for s in wave)
                clock = started + seg
                break
        else:
            tokens += sum(s[0] for s in wave)
            clock = started + max(ends)
            continue
        if settled_at is not None:
            tokens += sum(min(s[0], segment * settled_at) for s in wave)
            clock = started + settled_at
            break
    if not counts:
        return Outcome(right=False, tokens=tokens, rounds=clock, answered=answered)
    best = max(counts.items(), key=lambda kv: (kv[1], -first_at[kv[0]]))[0]
    return Outcome(
        right=right_of[best], tokens=tokens, rounds=clock, answered=answered, answer=best
    )


def _rules_for(n: int) -> list[Rule]:
    half = max(4, n // 2)
    return [
        Rule("every sample (self-consistency)", n, 1.0, stop=False),
        Rule(f"waves of {half}, p 0.95", half, 0.95),
        Rule("one wave, p 0.95", n, 0.95),
        Rule("one wave, p 0.99", n, 0.99),
        Rule(f"one wave, p 0.95, at least {n // 4} answered", n, 0.95, n // 4),
        Rule(f"one wave, p 0.95, at least {3 * n // 8} answered", n, 0.95, 3 * n // 8),
        Rule(f"one wave, p 0.95, at least {n // 2} answered", n, 0.95, n // 2),
        Rule(f"one wave, p 0.99, at least {n // 4} answered", n, 0.99, n // 4),
        Rule(f"one wave, p 0.99, at least {3 * n // 8} answered", n, 0.99, 3 * n // 8),
    ]


def _run(
    questions: Sequence[Sequence[Sample]], rules: Sequence[Rule], args: argparse.Namespace
) -> dict[str, list[list[Outcome]]]:
    """Per rule, per question, one outcome per deal; deal r of question i is the same for
    every rule."""
    out: dict[str, list[list[Outcome]]] = {r.label: [] for r in rules}
    for i, got in enumerate(questions):
        rng = random.Random(args.seed * 100_003 + i)
        deals = [rng.sample(list(got), args.n) for _ in range(args.deals)]
        for r in rules:
            out[r.label].append([replay(list(d), r, args.segment) for d in deals])
    return out


def _report(outcomes: dict[str, list[list[Outcome]]], args: argparse.Namespace) -> str:
    base_label = next(iter(outcomes))
    base = outcomes[base_label]
    base_tokens = statistics.fmean(o.tokens for q in base for o in q)
    lines = [
        "# The vote stop replayed on plain samples (python -m benchmarks.vote_stop_replay)",
        "",
        f"{len(base)} questions, N = {args.n} samples dealt {args.deals} times per question "
        f"from each question's {args.pool}, segments of {args.segment} tokens. Accuracy: "
        "the mean over questions of the share of deals answered right; the interval is "
        "the paired 95% interval over questions against the first row.",
        "",
        "| rule | accuracy % | paired interval (points) | thinking tokens | rounds "
        "| leaves answered at the vote | answer unlike the first row's |",
        "|---|---|---|---|---|---|---|",
    ]
    base_q = [statistics.fmean(o.right for o in q) for q in base]
    for label, per_q in outcomes.items():
        acc_q = [statistics.fmean(o.right for o in q) for q in per_q]
        diffs = [a - b for a, b in zip(acc_q, base_q, strict=True)]
        half = 1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0
        mean = statistics.fmean(diffs)
        low, high = 100 * (mean - half), 100 * (mean + half)
        interval = "" if label == base_label else f"[{low:+.1f}, {high:+.1f}]"
        tokens = statistics.fmean(o.tokens for q in per_q for o in q)
        rounds = statistics.fmean(o.rounds for q in per_q for o in q)
        answered = statistics.fmean(o.answered for q in per_q for o in q)
        unlike = statistics.fmean(
            o.answer != b.answer
            for q, bq in zip(per_q, base, strict=True)
            for o, b in zip(q, bq, strict=True)
        )
        lines.append(
            f"| {label} | {100 * statistics.fmean(acc_q):.1f} | {interval} | "
            f"{tokens:.0f} ({tokens / base_tokens:.2f}x) | {rounds:.1f} | {answered:.1f} | "
            f"{100 * unlike:.1f}% |"
        )
    lines += [
        "",
        f"Machine: {machine()}.",
        "",
        f"Command: `.venv/bin/python -m benchmarks.vote_stop_replay {' '.join(args.argv)}`",
        "",
    ]
    return "\n".join(lines)


def _load(paths: Sequence[str]) -> list[list[Sample]]:
    """Each question's samples from every file, joined (the files cover the same questions)."""
    files = [json.loads(Path(p).read_text())["samples"] for p in paths]
    if len({len(f) for f in files}) != 1:
        raise SystemExit("--samples files cover different numbers of questions")
    return [
        [(int(s[0]), bool(s[1]), s[2] if len(s) > 2 else None) for f in files for s in f[i]]
        for i in range(len(files[0]))
    ]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="benchmarks.vote_stop_replay", description=__doc__.split("\n")[0]
    )
    p.add_argument("--samples", action="append", required=True, help="tree_lengths JSON")
    p.add_argument("--n", type=int, default=16, help="leaves per tree")
    p.add_argument("--deals", type=int, default=50, help="orders replayed per question")
    p.add_argument("--segment", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "vote-stop-replay"), help="path prefix")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    questions = _load(args.samples)
    args.pool = min(len(q) for q in questions)
    if args.pool < args.n:
        raise SystemExit(f"--n {args.n} is more than the {args.pool} samples of a question")
    outcomes = _run(questions, _rules_for(args.n), args)
    text = _report(outcomes, args)
    beside(Path(args.out), ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
