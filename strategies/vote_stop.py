"""The majority vote's stop rule (``self-consistency`` with ``adaptive: true``, and every
``self-consistency`` plan ``auto`` runs): samples drawn in stages, the draw stopped as
soon as the vote is settled.

Settled (Adaptive-Consistency's Beta rule, Aggarwal et al. 2023): with ``a`` samples for
the leading answer and ``b`` for the runner-up, the posterior probability that the leader
holds more of the model's answers than the runner-up, ``P(X > 1/2)`` for ``X ~ Beta(a+1,
b+1)``, is at least ``confidence``. The rule is only read once ``min_samples`` answered
samples are in (one sample settles nothing). A stage that would not fit what is left of
the request's ceiling or deadline is not started (``strategies.sampling.adaptive_draw``),
and every sample drawn counts in the vote. Stages are seeded to continue the same pool:
a draw that stops early holds exactly the first samples a single draw of N would have.

Defaults: stages of 2, confidence 0.95, at least 3 answered samples. 4 of 4 samples
agreeing is 0.97 (stop at 4); 3 to 1, 0.81 and 5 to 1, 0.94 (go on); 7 to 1, 0.98 (stop
at 8); a split vote draws to the cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Final

from core import options
from core.base import JSON, StrategyRequest
from core.errors import InvalidRequest
from strategies.selection import AnswerClass

FLAG: Final = "adaptive"
CONFIDENCE: Final = "adaptive_confidence"
TUNING: Final = ("adaptive_round", CONFIDENCE)
OPTIONS: Final = frozenset({FLAG, *TUNING})


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteStop:
    round: int = 2  # samples per stage
    confidence: float = 0.95  # posterior probability that the leader leads
    min_samples: int = 3  # answered samples before the rule is read
    measure: ClassVar[str] = "posterior"  # what ``judge`` reads, as events name it

    def judge(self, classes: Sequence[AnswerClass]) -> tuple[bool, float]:
        """Whether the vote so far stops the draw, and the posterior it read."""
        return settled(classes, self)

    def report(self, cap: int, rounds: int, done: bool, measure: float) -> dict[str, JSON]:
        """The ``adaptive`` object of the response: the rule, and how the draw ended."""
        return {
            "rule": "beta",
            "round": self.round,
            "confidence": self.confidence,
            "cap": cap,
            "rounds": rounds,
            "stopped": "settled" if done else "cap",
            "posterior": round(measure, 6),
        }


def vote_stop(request: StrategyRequest) -> VoteStop | None:
    """The request's rule (None without ``adaptive: true``); 400 naming the field for a
    bad value, or for a tuning option without the flag."""
    opts = request.options
    if not flagged(request, TUNING):
        return None
    default = VoteStop()
    return VoteStop(
        round=options.integer(opts, "adaptive_round", default.round, lo=1),
        confidence=options.number(
            opts, "adaptive_confidence", default.confidence, lo=0.5, hi=0.999
        ),
    )


def flagged(request: StrategyRequest, tuning: Sequence[str]) -> bool:
    """Whether the request says ``adaptive: true``; a tuning option without it is a 400
    naming the option (a rule's knobs that would do nothing)."""
    opts = request.options
    if options.flag(opts, FLAG, False):
        return True
    for name in tuning:
        if opts.get(name) is not None:
            raise InvalidRequest(f"{name} applies with adaptive true only", param=name)
    return False


@lru_cache(maxsize=4096)
def leads(a: int, b: int) -> float:
    """``P(X > 1/2)`` for ``X ~ Beta(a+1, b+1)``: how sure the vote is that the answer
    with ``a`` samples is more likely than the one with ``b``."""
    from scipy.stats import beta

    return float(beta.sf(0.5, a + 1, b + 1))


def settled(classes: Sequence[AnswerClass], stop: VoteStop) -> tuple[bool, float]:
    """Whether the vote so far stops the draw, and the posterior it was judged on."""
    counts = sorted((len(c.members) for c in classes), reverse=True)
    if sum(counts) < stop.min_samples:
        return False, 0.0
    a, b = counts[0], (counts[1] if len(counts) > 1 else 0)
    p = leads(a, b)
    return p >= stop.confidence, p
