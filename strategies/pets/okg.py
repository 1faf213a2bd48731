"""Offline PETS: the optimistic knowledge gradient (OKG) over a batch of questions.

Pure allocation state, no engine: the caller asks which questions to sample next,
draws them however it likes (a stored pool, an engine round), and reports each answer
back. The rule (docs/specs.md §4, Chen et al. 2013 with traces as workers):

* every question starts from a ``Dirichlet(1)`` prior over ``max_options`` answer
  buckets; buckets are handed out as new answer classes appear;
* a warm-up of ``warm_up`` samples per question;
* then, round after round, the ``batch`` eligible questions of highest
  ``R+ = max_m h(alpha + c e_m) - h(alpha)`` get one sample each (ties: lowest index;
  ``batch = 1`` is the paper's sequential rule);
* each answer adds exactly ``c`` to one entry of its question's ``alpha``. An answer
  that needs a new bucket when all are taken is discarded (it still costs budget and
  does not vote), as in the reference code;
* it stops when the total budget is spent or no question is eligible (each has at
  most ``min(cap, available)`` samples).

Only questions whose posterior changed are re-estimated, so a round costs Monte Carlo
for ``batch`` questions, not for the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from strategies.pets.dirichlet import FloatArray, okg
from strategies.pets.labels import Label, majority_label


@dataclass(frozen=True, slots=True, kw_only=True)
class OkgConfig:
    """Knobs of the offline rule; defaults are the paper's (``cap`` is ours)."""

    total_budget: int  # samples for the whole batch (K * average budget)
    cap: int = 64  # most samples one question may get
    max_options: int = 16  # answer buckets per question
    c: float = 1.0  # posterior increment per answer
    draws: int = 500  # Monte Carlo draws per posterior
    warm_up: int = 1  # samples per question before OKG decides
    batch: int = 1  # questions sampled per round
    seed: int = 1024

    def __post_init__(self) -> None:
        if self.total_budget < 0:
            raise ValueError("total_budget must be >= 0")
        if self.cap < 1 or self.max_options < 1 or self.draws < 1 or self.batch < 1:
            raise ValueError("cap, max_options, draws and batch must be >= 1")
        if self.warm_up < 0 or self.c <= 0:
            raise ValueError("warm_up must be >= 0 and c > 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionResult:
    """What one question got: samples drawn, vote counts by label, the majority label."""

    samples: int
    votes: tuple[tuple[int, int], ...]  # (label, count), most votes first
    answer: Label
    discarded: int


class OkgAllocator:
    """The offline allocation state of one batch (see the module docstring)."""

    def __init__(
        self, n_questions: int, config: OkgConfig, *, available: Sequence[int] | None = None
    ) -> None:
        if available is not None and len(available) != n_questions:
            raise ValueError("available needs one entry per question")
        self.config = config
        self.alpha: FloatArray = np.ones((n_questions, config.max_options))
        limit = np.full(n_questions, config.cap, dtype=np.int64)
        if available is not None:
            limit = np.minimum(limit, np.asarray(available, dtype=np.int64))
        self.limit = limit
        self.used = np.zeros(n_questions, dtype=np.int64)
        self.pending = np.zeros(n_questions, dtype=np.int64)  # handed out, not yet observed
        self._options: list[dict[Label, int]] = [{} for _ in range(n_questions)]
        self._votes: list[list[Label]] = [[] for _ in range(n_questions)]
        self._discarded = np.zeros(n_questions, dtype=np.int64)
        self._gain = np.full(n_questions, np.nan)  # R+ cache; NaN: stale
        self._rng = np.random.default_rng(config.seed)
        self._warmed = config.warm_up == 0

    @property
    def n_questions(self) -> int:
        return int(self.alpha.shape[0])

    @property
    def spent(self) -> int:
        """Samples handed out so far (observed or in flight)."""
        return int(self.used.sum() + self.pending.sum())

    @property
    def remaining(self) -> int:
        return max(0, self.config.total_budget - self.spent)

    def _eligible(self) -> np.ndarray:
        return (self.used + self.pending) < self.limit

    def warmup_round(self) -> list[tuple[int, int]]:
        """``(question, samples)`` the warm-up still needs; empty once it has them all.

        Each question gets up to ``min(warm_up, its limit)``, counting what it already
        has (observed, replayed or in flight: a resumed batch only draws the missing
        ones); if the budget cannot cover everyone, the lowest indices go first.
        """
        self._warmed = True
        plan: list[tuple[int, int]] = []
        left = self.remaining
        for q in range(self.n_questions):
            have = int(self.used[q] + self.pending[q])
            n = int(min(self.config.warm_up - have, self.limit[q] - have, left))
            if n > 0:
                plan.append((q, n))
                self.pending[q] += n
                left -= n
        return plan

    def gains(self) -> FloatArray:
        """``R+`` of every question, re-estimating only those whose posterior changed."""
        stale = np.flatnonzero(np.isnan(self._gain))
        if stale.size:
            est = okg(self.alpha[stale], c=self.config.c, draws=self.config.draws, rng=self._rng)
            self._gain[stale] = est.gain
        return self._gain.copy()

    def next_round(self) -> list[int]:
        """Questions to sample once each in the next round (empty: the run is over).

        The top ``batch`` eligible questions by ``R+``, ties to the lowest index, no
        more than the budget left. Call after the warm-up has been observed.
        """
        if not self._warmed:
            raise RuntimeError("run warmup_round() first")
        k = min(self.config.batch, self.remaining)
        eligible = np.flatnonzero(self._eligible())
        if k <= 0 or eligible.size == 0:
            return []
        gain = self.gains()[eligible]
        # Stable sort on -gain keeps the lowest index first among equal gains.
        order = np.argsort(-gain, kind="stable")[:k]
        chosen = sorted(int(q) for q in eligible[order])
        self.pending[chosen] += 1
        return chosen

    def observe(self, q: int, label: Label) -> None:
        """Record one answer of question ``q`` that was handed out by a round."""
        if self.pending[q] <= 0:
            raise RuntimeError(f"question {q} has no sample in flight")
        self.pending[q] -= 1
        self.used[q] += 1
        options = self._options[q]
        bucket = options.get(label)
        if bucket is None:
            if len(options) >= self.config.max_options:
                self._discarded[q] += 1
                return
            bucket = options[label] = len(options)
        self.alpha[q, bucket] += self.config.c
        self._votes[q].append(label)
        self._gain[q] = np.nan

    def replay(self, q: int, label: Label) -> None:
        """Record an answer of ``q`` drawn before a restart (not handed out by a round of
        this allocator): it counts exactly as if :meth:`observe` had seen it."""
        self.pending[q] += 1
        self.observe(q, label)

    def cancel(self, q: int) -> None:
        """Give back one in-flight sample of ``q`` that will never be observed."""
        if self.pending[q] <= 0:
            raise RuntimeError(f"question {q} has no sample in flight")
        self.pending[q] -= 1

    def result(self, q: int) -> QuestionResult:
        votes = self._votes[q]
        counts: dict[int, int] = {}
        for x in votes:
            if x is not None:
                counts[x] = counts.get(x, 0) + 1
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], votes.index(kv[0])))
        return QuestionResult(
            samples=int(self.used[q]),
            votes=tuple(ranked),
            answer=majority_label(votes),
            discarded=int(self._discarded[q]),
        )
