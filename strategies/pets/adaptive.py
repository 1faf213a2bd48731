"""The online fallback when no allocation table is loaded: sample until settled.

Samples are drawn in small rounds; after each, the posterior probability that the
current majority is the infinite-budget majority is estimated, and sampling stops
once it reaches ``threshold`` (or the cap is hit). The posterior is a Dirichlet with
a ``1`` prior over the answer classes seen so far plus one pseudo-class standing for
every answer not seen yet (without it, four agreeing samples would be a certainty).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from strategies.pets.dirichlet import argmax_probs
from strategies.pets.labels import Label, majority_label


@dataclass(frozen=True, slots=True, kw_only=True)
class AdaptiveRule:
    """Stopping rule knobs (documented defaults)."""

    threshold: float = 0.95
    round_size: int = 4  # samples per round after the warm-up
    draws: int = 4000  # Monte Carlo draws per check


DEFAULT_RULE: Final = AdaptiveRule()


def majority_confidence(labels: Sequence[Label], *, draws: int, rng: np.random.Generator) -> float:
    """``P[argmax p = current majority]`` under the posterior described above.

    0.0 when no sample has an answer yet.
    """
    winner = majority_label(labels)
    if winner is None:
        return 0.0
    counts = Counter(x for x in labels if x is not None)
    classes = list(counts)
    alpha = np.array([[1.0 + counts[c] for c in classes] + [1.0]])
    return float(argmax_probs(alpha, draws=draws, rng=rng)[0, classes.index(winner)])


def next_round(
    labels: Sequence[Label], *, cap: int, rule: AdaptiveRule, rng: np.random.Generator
) -> tuple[int, float]:
    """How many samples to draw next (0: stop) and the confidence it was decided on."""
    left = cap - len(labels)
    if left <= 0:
        return 0, majority_confidence(labels, draws=rule.draws, rng=rng) if labels else 0.0
    confidence = majority_confidence(labels, draws=rule.draws, rng=rng)
    if confidence >= rule.threshold:
        return 0, confidence
    return min(rule.round_size, left), confidence
