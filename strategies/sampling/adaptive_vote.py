"""An adaptive stop for the weighted vote (``best-of-n``, ``select: vote``, ``adaptive``).

Samples are drawn in rounds of ``adaptive_round`` (each round one engine request, seeded
to continue the same pool: round r's samples are the ones a single draw of N would have
made at those positions); after each round the PRM-weighted vote is read, and sampling
stops once its leading class holds at least ``adaptive_share`` of the summed weight of
the answered samples and at least ``adaptive_weight`` of weight itself, or once N
(``X-Budget-Samples``, the cap) samples are drawn. The least weight keeps a round of
samples the PRM scores near zero from settling anything.

The defaults (rounds of 4, share 0.5, weight 0.5) were chosen offline on 300
validation questions of 12-13 operations (16 seeded samples each, the shipped PRM): the
vote stopped after 7.9 samples on average, 73.0% right against the majority of all 16's
73.0% (``python -m benchmarks.adaptive_stop``,
``benchmarks/results/adaptive_stop/adaptive-stop.md``;
``benchmarks/results/search/adaptive.md`` measures it on the search bench).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from core import options
from core.base import JSON, StrategyRequest
from strategies.selection import AnswerClass
from strategies.vote_stop import flagged

FLAG: Final = "adaptive"
TUNING: Final = ("adaptive_round", "adaptive_share", "adaptive_weight")
OPTIONS: Final = frozenset({FLAG, *TUNING})


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveStop:
    round: int = 4  # samples per round, the first included
    share: float = 0.5  # of the answered samples' summed weight, held by the leader
    weight: float = 0.5  # the leader's own summed weight
    measure: ClassVar[str] = "leader_share"  # what ``judge`` reads, as events name it

    def judge(self, classes: Sequence[AnswerClass]) -> tuple[bool, float]:
        """Whether the vote so far stops the draw, and the leader's share it read."""
        return settled(classes, self), leader_share(classes)

    def report(self, cap: int, rounds: int, done: bool, measure: float) -> dict[str, JSON]:
        return report(self, cap, rounds, done, measure)


def adaptive_stop(request: StrategyRequest) -> AdaptiveStop | None:
    """The request's stop rule, None without ``adaptive: true``; 400 naming the field for
    a bad value, or for a tuning option without the flag."""
    opts = request.options
    if not flagged(request, TUNING):
        return None
    default = AdaptiveStop()
    return AdaptiveStop(
        round=options.integer(opts, "adaptive_round", default.round, lo=1),
        share=options.number(opts, "adaptive_share", default.share, lo=0.0, hi=1.0, lo_open=True),
        weight=options.number(opts, "adaptive_weight", default.weight, lo=0.0),
    )


def leader_weight(classes: Sequence[AnswerClass]) -> tuple[float, float]:
    """The leading class's summed weight and all answered samples' summed weight."""
    sums = [sum(c.rewards) for c in classes]
    return (max(sums) if sums else 0.0), sum(sums)


def settled(classes: Sequence[AnswerClass], stop: AdaptiveStop) -> bool:
    """Whether the vote so far stops the draw (no answered sample: never)."""
    lead, total = leader_weight(classes)
    return bool(classes) and total > 0.0 and lead >= stop.weight and lead >= stop.share * total


def leader_share(classes: Sequence[AnswerClass]) -> float:
    """The leading class's share of the answered samples' summed weight (none: 0)."""
    lead, total = leader_weight(classes)
    return lead / total if total > 0.0 else 0.0


def round_event(
    samples: int, share: float, done: bool, *, measure: str = "leader_share"
) -> dict[str, JSON]:
    """The progress event after a round: what has been drawn and where the vote stands
    (``measure``: what the rule reads, the leader's share or the vote's posterior)."""
    return {
        "phase": "adaptive",
        "samples": samples,
        measure: round(share, 6),
        "settled": done,
    }


def report(stop: AdaptiveStop, cap: int, rounds: int, done: bool, share: float) -> dict[str, JSON]:
    """The ``adaptive`` object of the response: the rule, and how the draw ended."""
    return {
        "round": stop.round,
        "share": stop.share,
        "weight": stop.weight,
        "cap": cap,
        "rounds": rounds,
        "stopped": "settled" if done else "cap",
        "leader_share": round(share, 6),
    }
