"""``particle-filtering``: N particles, one step each per round, resampled by PRM weight.

Puri et al. 2025 ("A probabilistic inference approach to inference-time scaling"):
every live particle is extended by one step (one engine round; particles that share a
path share a request), each particle's weight is the softmax over particles of
``logit(r) / resample_temperature``, ``r`` the PRM's reward of its latest step, and N
particles are drawn with replacement by weight (seeded by the request's ``seed``):
``systematic`` resampling by default (one uniform draw, N evenly spaced points: every
particle of weight w is kept floor(Nw) or ceil(Nw) times, so equal weights keep every
particle once), or ``multinomial`` (N independent draws; with equal weights it still
loses about a third of the particles a step, and over the tens of steps of a reasoning
trace the particles collapse onto one ancestor, whatever the PRM says). Finished
particles take part in the draw with their last reward, so a good
finished path may be copied and a bad one dropped; the search ends when every particle
has finished (or ``max_steps``). Properties: a constant PRM resamples uniformly
(systematic: every particle kept once);
``resample_temperature: 0`` keeps the best particle N times (greedy); resampling
never creates a path that was not generated.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import ClassVar, Final

from core.base import JSON, StrategyContext
from strategies.search_options import SearchOptions
from strategies.search_paths import Path
from strategies.step_search import COMMON_OPTIONS, SearchState, StepSearch

# Rewards are clipped away from 0 and 1 before the logit, so a certain PRM is a strong
# preference, not an infinite one.
CLIP: Final = 1e-4


def logit(r: float) -> float:
    r = min(1.0 - CLIP, max(CLIP, r))
    return math.log(r / (1.0 - r))


def weights(rewards: Sequence[float], temperature: float) -> list[float]:
    """Softmax of ``logit(r) / temperature``; temperature 0: all weight on the first
    best particle."""
    if temperature == 0.0:
        top = max(range(len(rewards)), key=lambda i: (rewards[i], -i))
        return [1.0 if i == top else 0.0 for i in range(len(rewards))]
    z = [logit(r) / temperature for r in rewards]
    m = max(z)
    e = [math.exp(v - m) for v in z]
    total = sum(e)
    return [v / total for v in e]


def latest(path: Path) -> float:
    """A particle's latest step reward (no step yet: neutral)."""
    return path.rewards[-1] if path.rewards else 0.5


def systematic(w: Sequence[float], k: int, rng: random.Random) -> list[int]:
    """``k`` indices by systematic (low-variance) resampling of the weights ``w``."""
    u = rng.random() / k
    picks: list[int] = []
    total, i = w[0], 0
    for j in range(k):
        point = u + j / k
        while point > total and i < len(w) - 1:
            i += 1
            total += w[i]
        picks.append(i)
    return picks


def resample(
    particles: Sequence[Path],
    temperature: float,
    rng: random.Random,
    method: str = "systematic",
) -> list[Path]:
    w = weights([latest(p) for p in particles], temperature)
    if method == "systematic":
        picks = systematic(w, len(particles), rng)
    else:
        picks = rng.choices(range(len(particles)), weights=w, k=len(particles))
    return [particles[i] for i in sorted(picks)]


class ParticleFiltering(StepSearch):
    name: ClassVar[str] = "particle-filtering"
    body_options: ClassVar[frozenset[str]] = COMMON_OPTIONS | {
        "resample_temperature",
        "resampling",
    }

    def start(self, ctx: StrategyContext, n: int, options: SearchOptions) -> SearchState:
        return SearchState(live=(Path(),) * n)

    def per_parent(self, options: SearchOptions) -> int:
        return 1

    def advance(
        self,
        state: SearchState,
        children: Sequence[Sequence[Path]],
        n: int,
        options: SearchOptions,
        rng: random.Random,
    ) -> SearchState:
        particles = [c for group in children for c in group] + list(state.complete)
        drawn = resample(particles, options.resample_temperature, rng, options.resampling)
        return SearchState(
            live=tuple(p for p in drawn if p.live),
            complete=tuple(p for p in drawn if not p.live),
        )

    def trace(self, n: int, options: SearchOptions) -> dict[str, JSON]:
        return {
            "particles": n,
            "resample_temperature": options.resample_temperature,
            "resampling": options.resampling,
        }
