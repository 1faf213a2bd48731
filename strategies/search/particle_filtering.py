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

``weights: ratio`` is twisted sequential Monte Carlo (Zhao et al. 2024) with the PRM as
the twist: a particle's weight is the softmax of ``log(r_t / r_(t-1)) /
resample_temperature``, how much its latest step moved the PRM's reward (the first
step: ``log r_1``), and a particle that finished in an earlier round weighs as if
unchanged (0). Resampling by the latest reward every round re-applies a path's standing
reward at every step, so over T steps the particles are drawn by the product of their
rewards, which copies whichever path the PRM slightly prefers and drops the rest; by
the ratio, the draw after step t follows the PRM's reward of the path so far, once.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import ClassVar, Final

from core.base import JSON
from strategies.search.paths import Path
from strategies.search.step_search import COMMON_OPTIONS, SearchState, StepSearch
from strategies.search_options import SearchOptions

# Rewards are clipped away from 0 and 1 before the logit, so a certain PRM is a strong
# preference, not an infinite one.
CLIP: Final = 1e-4


def logit(r: float) -> float:
    r = min(1.0 - CLIP, max(CLIP, r))
    return math.log(r / (1.0 - r))


def softmax(z: Sequence[float], temperature: float) -> list[float]:
    """Softmax of ``z / temperature``; temperature 0: all weight on the first largest."""
    if temperature == 0.0:
        top = max(range(len(z)), key=lambda i: (z[i], -i))
        return [1.0 if i == top else 0.0 for i in range(len(z))]
    scaled = [v / temperature for v in z]
    m = max(scaled)
    e = [math.exp(v - m) for v in scaled]
    total = sum(e)
    return [v / total for v in e]


def weights(rewards: Sequence[float], temperature: float) -> list[float]:
    """Softmax of ``logit(r) / temperature``; temperature 0: all weight on the first
    best particle."""
    return softmax([logit(r) for r in rewards], temperature)


def latest(path: Path) -> float:
    """A particle's latest step reward (no step yet: neutral)."""
    return path.rewards[-1] if path.rewards else 0.5


def change(path: Path) -> float:
    """``log(r_t / r_(t-1))``: how much the latest step moved the PRM's reward of the
    path (the first step from 1; no step yet: 0)."""
    if not path.rewards:
        return 0.0
    before = math.log(max(CLIP, path.rewards[-2])) if len(path.rewards) > 1 else 0.0
    return math.log(max(CLIP, path.rewards[-1])) - before


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
    log_weights: Sequence[float] | None = None,
) -> list[Path]:
    """N particles drawn by weight: the softmax of ``log_weights`` (default: each
    particle's latest reward as log-odds) at ``temperature``."""
    w = (
        weights([latest(p) for p in particles], temperature)
        if log_weights is None
        else softmax(log_weights, temperature)
    )
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
        "weights",
        "speculate",
    }
    speculates: ClassVar[bool] = True

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
        grown = [c for group in children for c in group]
        particles = grown + list(state.complete)
        z: list[float] | None = None
        if options.weights == "ratio":
            # Particles finished in an earlier round took no step: their reward is unchanged.
            z = [change(c) for c in grown] + [0.0] * len(state.complete)
        drawn = resample(
            particles, options.resample_temperature, rng, options.resampling, log_weights=z
        )
        return SearchState(
            live=tuple(p for p in drawn if p.live),
            complete=tuple(p for p in drawn if not p.live),
        )

    def trace(self, n: int, options: SearchOptions) -> dict[str, JSON]:
        return {
            "particles": n,
            "resample_temperature": options.resample_temperature,
            "resampling": options.resampling,
            "weights": options.weights,
            "speculate": options.speculate,
        }
