"""``thinkgate fit``'s stop rule: the confidence at which ``auto``'s staged votes stop
(``strategies.vote_stop``), fitted on the fit part's PETS pools (``fit_pets``) by replaying
the staged draw on each pool.

For each candidate confidence the replay draws a pool's samples in stages of the rule's
``round`` up to ``CAP`` (the largest vote ``auto`` plans), stops where the rule stops, and
compares the stopped vote's answer with the whole draw's. The rule chosen is the lowest
confidence (the fewest samples) whose answers agree with the whole draw's on at least
``AGREEMENT`` of the pools; none does, the documented default (0.95) stays. The replay is
the rule on the model's own answers: it costs no sampling beyond the pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from strategies.pets.calibration.simulate import Pool
from strategies.vote_stop import VoteStop, leads

CANDIDATES: Final = (0.8, 0.85, 0.9, 0.95, 0.975, 0.99)
CAP: Final = 16
AGREEMENT: Final = 0.99


@dataclass(frozen=True, slots=True)
class Candidate:
    confidence: float
    agreement: float  # share of pools whose stopped answer is the whole draw's
    samples: float  # mean samples drawn
    accuracy: float  # share right (the workload's answer, or its consensus)


@dataclass(frozen=True, slots=True)
class StopFit:
    confidence: float  # the rule's, chosen (or the default)
    pools: int
    candidates: tuple[Candidate, ...] = field(default=())
    chosen_by: str = "default"  # "fit" or "default"


def _leader(labels: Sequence[int | None]) -> int | None:
    counts: dict[int, int] = {}
    for label in labels:
        if label is not None:
            counts[label] = counts.get(label, 0) + 1
    # Ties go to the answer seen first, as the vote's order does.
    return max(counts, key=lambda k: (counts[k], -labels.index(k))) if counts else None


def replay(labels: Sequence[int | None], stop: VoteStop, cap: int = CAP) -> tuple[int | None, int]:
    """The answer and the samples drawn when ``stop`` rules a staged draw of ``labels``."""
    drawn = 0
    while drawn < min(cap, len(labels)):
        drawn = min(cap, len(labels), drawn + stop.round)
        seen = [x for x in labels[:drawn] if x is not None]
        if len(seen) >= stop.min_samples:
            counts = sorted((seen.count(x) for x in set(seen)), reverse=True)
            a, b = counts[0], counts[1] if len(counts) > 1 else 0
            if leads(a, b) >= stop.confidence:
                break
    return _leader(list(labels[:drawn])), drawn


def fit_stop(pools: Sequence[Pool]) -> StopFit:
    """The lowest confidence whose stopped votes agree with the whole draws'."""
    default = VoteStop()
    if not pools:
        return StopFit(default.confidence, 0)
    out: list[Candidate] = []
    for c in CANDIDATES:
        stop = VoteStop(round=default.round, confidence=c, min_samples=default.min_samples)
        agree = right = drawn = 0
        for pool in pools:
            answer, n = replay(pool.labels, stop)
            agree += answer == _leader(list(pool.labels[:CAP]))
            drawn += n
            # A pool's gold is None when no sample matched it: a stopped vote is wrong.
            right += answer is not None and answer == pool.gold
        k = len(pools)
        out.append(Candidate(c, agree / k, drawn / k, right / k))
    ok = [c for c in out if c.agreement >= AGREEMENT]
    if not ok:
        return StopFit(default.confidence, len(pools), tuple(out))
    best = min(ok, key=lambda c: (c.samples, c.confidence))
    return StopFit(best.confidence, len(pools), tuple(out), "fit")
