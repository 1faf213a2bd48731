"""PETS evaluated on stored answer pools (the paper's protocol, docs/specs.md §4).

Per run, each question's pool is shuffled; its consistency label is the majority of
the shuffled pool (the infinite-budget majority, approximated), and a method sees the
pool's answers in that order: uniform takes a prefix of ``B``; online takes the warm-up
prefix, then a prefix of the bucket's ``B_t``; offline lets OKG pick which pool to draw
from next. SC is the share of questions whose vote equals the consistency label;
accuracy the share whose vote is the gold class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strategies.pets.labels import K0, Label, majority_label, pattern
from strategies.pets.okg import OkgAllocator, OkgConfig
from strategies.pets.table import PetsTable


@dataclass(frozen=True, slots=True, kw_only=True)
class Pool:
    """One question's stored answers as labels, and the gold answer's label (None if
    no sample ever matched the gold answer)."""

    labels: tuple[Label, ...]
    gold: Label


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """Mean over runs: self-consistency rate, accuracy, samples per question."""

    sc: float
    accuracy: float
    samples: float


def _shuffled(pools: Sequence[Pool], rng: np.random.Generator) -> list[tuple[Label, ...]]:
    return [tuple(p.labels[i] for i in rng.permutation(len(p.labels))) for p in pools]


def _score(
    pools: Sequence[Pool],
    runs: Sequence[Sequence[tuple[Label, ...]]],
    picks: list[list[Label]],
    used: list[int],
) -> Outcome:
    sc = acc = 0.0
    for run, answers in zip(runs, picks, strict=True):
        for pool, order, answer in zip(pools, run, answers, strict=True):
            sc += answer == majority_label(order)
            acc += answer is not None and answer == pool.gold
    n = len(pools) * len(runs)
    return Outcome(sc=sc / n, accuracy=acc / n, samples=sum(used) / n)


def _runs(pools: Sequence[Pool], runs: int, seed: int) -> list[list[tuple[Label, ...]]]:
    return [_shuffled(pools, np.random.default_rng(seed + r)) for r in range(runs)]


def uniform(pools: Sequence[Pool], budget: int, *, runs: int = 10, seed: int = 0) -> Outcome:
    """Self-consistency with ``budget`` samples per question."""
    shuffled = _runs(pools, runs, seed)
    picks = [[majority_label(order[:budget]) for order in run] for run in shuffled]
    used = [sum(min(budget, len(order)) for order in run) for run in shuffled]
    return _score(pools, shuffled, picks, used)


def online(pools: Sequence[Pool], table: PetsTable, *, runs: int = 10, seed: int = 0) -> Outcome:
    """The online rule: ``K0`` warm-up answers, their pattern's ``B_t``, vote."""
    shuffled = _runs(pools, runs, seed)
    picks: list[list[Label]] = []
    used: list[int] = []
    for run in shuffled:
        answers: list[Label] = []
        total = 0
        for order in run:
            n = min(table.budget(pattern(order[:K0])), len(order))
            answers.append(majority_label(order[:n]))
            total += n
        picks.append(answers)
        used.append(total)
    return _score(pools, shuffled, picks, used)


def offline(
    pools: Sequence[Pool],
    average_budget: float,
    *,
    runs: int = 10,
    seed: int = 0,
    cap: int = 64,
    batch: int = 1,
    draws: int = 500,
    max_options: int = 16,
) -> Outcome:
    """OKG over the whole set with ``len(pools) * average_budget`` samples in total."""
    shuffled = _runs(pools, runs, seed)
    picks: list[list[Label]] = []
    used: list[int] = []
    for r, run in enumerate(shuffled):
        config = OkgConfig(
            total_budget=int(round(len(pools) * average_budget)),
            cap=cap,
            batch=batch,
            draws=draws,
            max_options=max_options,
            seed=1024 + seed + r,
        )
        alloc = run_okg_on_pools(run, config)
        picks.append([alloc.result(q).answer for q in range(len(run))])
        used.append(alloc.spent)
    return _score(pools, shuffled, picks, used)


def run_okg_on_pools(orders: Sequence[Sequence[Label]], config: OkgConfig) -> OkgAllocator:
    """Run OKG to the end, answering each draw with the next answer of that pool."""
    alloc = OkgAllocator(len(orders), config, available=[len(o) for o in orders])
    for q, n in alloc.warmup_round():
        for _ in range(n):
            alloc.observe(q, orders[q][int(alloc.used[q])])
    while chosen := alloc.next_round():
        for q in chosen:
            alloc.observe(q, orders[q][int(alloc.used[q])])
    return alloc
