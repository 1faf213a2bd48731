"""Online PETS calibration math: consistency curves, probit fits, warm-up patterns.

For a calibration question with a pool of answers (labels), ``l`` is the pool's
majority and ``A(k)`` the probability that the majority of ``k`` i.i.d. draws from the
pool's empirical distribution is ``l`` (ties split evenly). PETS models it as
``A(k) ~ Phi(a sqrt(k) + b)`` and fits ``(a, b)`` by least squares on ``probit(A)``
for ``k = 3..k_max``. ``pi(t)`` is the probability that ``K0 = 4`` warm-up draws
show count pattern ``t``; here it is exact (power sums of the class frequencies)
instead of the reference code's 2000 draws.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.stats import norm

from strategies.pets.dirichlet import FloatArray
from strategies.pets.labels import PATTERNS, Label, majority_label

# A(k) is clipped into [EPS, 1 - EPS] before probit: a pool that always agrees gives
# a = 0 and a large b (no gain from more samples) instead of an infinite fit.
EPS: Final = 1e-4


def consistency_curve(
    labels: Sequence[Label], *, k_max: int, trials: int, rng: np.random.Generator
) -> FloatArray:
    """``A(k)`` for ``k = 1..k_max`` (index ``k - 1``), by Monte Carlo.

    Draws ``trials`` sequences of ``k_max`` i.i.d. answers from the pool and scores
    every prefix; a tie for the most votes among ``j`` classes including ``l`` counts
    ``1/j``. ``None`` answers never win. Raises ``ValueError`` for a pool with no answer.
    """
    label = majority_label(labels)
    if label is None:
        raise ValueError("a pool without any answer has no consistency label")
    freq = Counter(labels)
    classes = list(freq)
    probs = np.array([freq[c] for c in classes], dtype=np.float64) / len(labels)
    target = classes.index(label)
    draws = rng.choice(len(classes), size=(trials, k_max), p=probs)
    onehot = np.zeros((trials, k_max, len(classes)), dtype=np.int32)
    np.put_along_axis(onehot, draws[:, :, None], 1, axis=2)
    counts = onehot.cumsum(axis=1)
    if None in freq:
        counts[:, :, classes.index(None)] = -1  # "no answer" never wins the vote
    top = counts.max(axis=2, keepdims=True)
    tied = counts == top
    share = tied[:, :, target] / tied.sum(axis=2)
    out: FloatArray = share.mean(axis=0)
    return out


def fit_probit(curve: FloatArray, *, k_min: int = 3) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``probit(A(k)) = a sqrt(k) + b`` over ``k >= k_min``."""
    k = np.arange(1, curve.size + 1, dtype=np.float64)[k_min - 1 :]
    if k.size < 2:
        raise ValueError(f"need a curve up to k >= {k_min + 1}")
    y = norm.ppf(np.clip(curve[k_min - 1 :], EPS, 1.0 - EPS))
    design = np.stack([np.sqrt(k), np.ones_like(k)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(a), float(b)


def pattern_probs(labels: Sequence[Label]) -> FloatArray:
    """Exact ``P(pattern)`` of 4 i.i.d. draws from the pool, in ``PATTERNS`` order."""
    p = np.array(list(Counter(labels).values()), dtype=np.float64) / len(labels)
    s2, s3, s4 = (float(np.sum(p**j)) for j in (2, 3, 4))
    four = s4
    three_one = 4.0 * (s3 - s4)
    two_two = 3.0 * (s2 * s2 - s4)
    # 24 * e4 (fourth elementary symmetric polynomial) by Newton's identities, s1 = 1.
    distinct = 1.0 - 6.0 * s2 + 3.0 * s2 * s2 + 8.0 * s3 - 6.0 * s4
    two_one_one = 1.0 - four - three_one - two_two - distinct
    out = np.clip(np.array([four, three_one, two_two, two_one_one, distinct]), 0.0, 1.0)
    normalised: FloatArray = out / out.sum()
    return normalised


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionFit:
    """One calibration question: its probit curve and warm-up pattern probabilities."""

    a: float
    b: float
    pattern_probs: tuple[float, ...]


def fit_question(
    labels: Sequence[Label], *, k_max: int = 32, trials: int = 4000, rng: np.random.Generator
) -> QuestionFit:
    curve = consistency_curve(labels, k_max=k_max, trials=trials, rng=rng)
    a, b = fit_probit(curve)
    return QuestionFit(a=a, b=b, pattern_probs=tuple(float(x) for x in pattern_probs(labels)))


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketParams:
    """Per warm-up pattern (``PATTERNS`` order): probability and pooled ``(a, b)``."""

    pi: tuple[float, ...]
    a: tuple[float, ...]
    b: tuple[float, ...]


def bucket_params(fits: Sequence[QuestionFit]) -> BucketParams:
    """``pi_t = mean_q pi_q(t)``; ``a_t, b_t`` the ``pi_q(t)``-weighted means.

    A pattern no calibration question can show (weight 0) takes the plain means, so
    a question that does show it still gets a sensible curve.
    """
    if not fits:
        raise ValueError("no calibration questions")
    w = np.array([f.pattern_probs for f in fits])  # (questions, patterns)
    a = np.array([f.a for f in fits])
    b = np.array([f.b for f in fits])
    mass = w.sum(axis=0)
    safe = np.where(mass > 0, mass, 1.0)
    a_t = np.where(mass > 0, (w * a[:, None]).sum(axis=0) / safe, a.mean())
    b_t = np.where(mass > 0, (w * b[:, None]).sum(axis=0) / safe, b.mean())
    assert w.shape[1] == len(PATTERNS)
    return BucketParams(
        pi=tuple(float(x) for x in mass / len(fits)),
        a=tuple(float(x) for x in a_t),
        b=tuple(float(x) for x in b_t),
    )
