"""The tree's vote-aware stop (``vote_stop``): leaves are answered as they finish, and the
tree stops growing once their vote is settled, its live branches abandoned.

- ``decided``: the leader's lead over the runner-up is larger than the leaves still to
  come (the samples budget less the finished leaves) could close, even if every one of
  them voted for the runner-up. The vote of the whole tree could not differ, so this
  stop never changes the answer; it saves the tokens the late leaves would have spent.
  Under ``vote: confidence`` the lead is in summed confidence, and a leaf to come weighs
  at most 1.
- ``likely``: also stops once the leader is probably the more frequent of the two:
  Adaptive-Consistency's rule (Aggarwal et al. 2023), the probability under a uniform
  prior that the leader's share of the model's answers exceeds the runner-up's,
  ``P(Beta(a+1, b+1) > 1/2)`` for ``a`` and ``b`` leaves, is at least ``vote_stop_p``.
  It reads counts whatever the vote, and trades some agreement with the full vote for
  tokens.
- ``never``: the tree grows until its N leaves have finished.

A leaf answered early is answered once: the tokens are those the end of the tree would
have spent on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final, Literal

from strategies.selection import AnswerClass

VoteStop = Literal["never", "decided", "likely"]
VOTE_STOPS: Final = ("never", "decided", "likely")


def lead_probability(leader: int, second: int) -> float:
    """``P(X > 1/2)`` for ``X ~ Beta(leader + 1, second + 1)``: for integer parameters,
    ``P(Binomial(leader + second + 1, 1/2) <= leader)``, exactly."""
    m = leader + second + 1
    return sum(math.comb(m, k) for k in range(leader + 1)) / (1 << m)


def settled(
    classes: Sequence[AnswerClass],
    to_come: int,
    *,
    rule: VoteStop,
    weighted: bool,
    p: float,
) -> bool:
    """Whether the answered leaves' vote is settled (see the module's docstring);
    ``classes``: the answered leaves' (those with no answer join none), ``to_come``: the
    leaves that may still finish."""
    if not classes:
        return False
    return _settles(classes, 0, to_come, rule=rule, weighted=weighted, p=p)


def could_settle(
    classes: Sequence[AnswerClass],
    new: int,
    to_come: int,
    *,
    rule: VoteStop,
    weighted: bool,
    p: float,
) -> bool:
    """Whether answering ``new`` finished leaves could settle the vote: it would if every
    one of them joined the leader (the best case for a stop: joining the runner-up or a
    new answer leads by less, and a leaf weighs at most 1). ``to_come`` counts them."""
    if new <= 0:
        return False
    return _settles(classes, new, to_come - new, rule=rule, weighted=weighted, p=p)


def settle_chance(
    classes: Sequence[AnswerClass],
    coming: int,
    to_come: int,
    *,
    rule: VoteStop,
    weighted: bool,
    p: float,
) -> float:
    """The chance that the ``coming`` leaves settle the vote once answered, each joining
    the leader with its share of the answered leaves so far by Laplace's rule
    (``(leader + 1) / (answered + 2)``) and otherwise answering something else that
    strengthens no rival (so this errs high: the next wave starts no sooner for it).
    0 when even all of them joining the leader would not settle it (``could_settle``);
    else 1 with nothing answered yet (no evidence to start another wave on)."""
    if coming <= 0 or rule == "never":
        return 0.0
    if not _settles(classes, coming, to_come - coming, rule=rule, weighted=weighted, p=p):
        return 0.0
    if not classes:
        return 1.0
    answered = sum(c.count for c in classes)
    q = (max(c.count for c in classes) + 1) / (answered + 2)
    chance = 0.0
    for joining in range(coming + 1):
        if _settles(classes, joining, to_come - coming, rule=rule, weighted=weighted, p=p):
            chance += math.comb(coming, joining) * q**joining * (1 - q) ** (coming - joining)
    return chance


def _settles(
    classes: Sequence[AnswerClass],
    joining: int,
    to_come: int,
    *,
    rule: VoteStop,
    weighted: bool,
    p: float,
) -> bool:
    """The rule on the classes with ``joining`` more leaves for the leader."""
    if rule == "never":
        return False
    weights = sorted((sum(c.rewards) if weighted else c.count for c in classes), reverse=True)
    lead = (weights[0] if weights else 0.0) + joining
    second = weights[1] if len(weights) > 1 else 0.0
    if lead - second > to_come:
        return True
    if rule == "likely":
        counts = sorted((c.count for c in classes), reverse=True)
        leader = (counts[0] if counts else 0) + joining
        runner = counts[1] if len(counts) > 1 else 0
        return lead_probability(leader, runner) >= p
    return False
