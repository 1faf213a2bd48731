"""Monte Carlo over Dirichlet posteriors, vectorised over questions x classes x draws.

A question's answer distribution ``p`` has posterior ``Dir(alpha)``. The quantities
PETS needs are

* ``I_m(alpha) = P[argmax p = m]`` -- which answer the infinite-budget majority is;
* ``h(alpha) = max_m I_m(alpha)`` -- the chance that the current plug-in answer is it;
* ``R+(alpha) = max_m h(alpha + c e_m) - h(alpha)`` -- the optimistic knowledge gradient
  (OKG): the best-case gain of one more sample.

``p ~ Dir(alpha)`` is sampled as normalised ``X_j ~ Gamma(alpha_j, 1)``; the argmax does
not need the normalisation. For the bumped posteriors ``alpha + c e_m`` the same draws
are reused with ``X_m + G_m``, ``G_m ~ Gamma(c, 1)`` (a sum of independent Gammas of one
scale is Gamma of the summed shapes), so every ``h(alpha + c e_m)`` and ``h(alpha)`` share
common random numbers: their differences are far less noisy than independent estimates,
and all ``M + 1`` posteriors of a question cost ``2 M`` Gamma draws per Monte Carlo
sample instead of ``M (M + 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

# Elements of one (questions x classes x draws) block; bounds peak memory (~10 arrays
# of this many float64/int64 entries) whatever the batch size.
_BLOCK_ELEMENTS: Final = 1 << 21

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class OkgEstimate:
    """``h`` (questions,) and ``bumped`` (questions, classes): ``h(alpha + c e_m)``."""

    h: FloatArray
    bumped: FloatArray

    @property
    def gain(self) -> FloatArray:
        """``R+`` per question: the best one-sample gain (may be slightly negative: noise)."""
        out: FloatArray = self.bumped.max(axis=1) - self.h
        return out


def _gamma(rng: np.random.Generator, shape: FloatArray, draws: int) -> FloatArray:
    """``draws`` Gamma(shape, 1) variates per entry of ``shape``, laid out (q, draws, m)
    so that reductions over classes run along contiguous memory.

    Posteriors hold few distinct values (1 + counts), and numpy draws a scalar shape
    about three times faster than an array of shapes, so draw per distinct value.
    """
    q, m = shape.shape
    out = np.empty((q, m, draws))
    values, inverse = np.unique(shape, return_inverse=True)
    inverse = inverse.reshape(q, m)
    for i, value in enumerate(values):
        where = inverse == i
        size = (int(where.sum()), draws)
        if value == 1.0:
            out[where] = rng.standard_exponential(size=size)
        else:
            out[where] = rng.standard_gamma(value, size=size)
    return np.ascontiguousarray(out.transpose(0, 2, 1))


def _block_rows(m: int, draws: int) -> int:
    return max(1, _BLOCK_ELEMENTS // max(1, m * draws))


def argmax_probs(alpha: FloatArray, *, draws: int, rng: np.random.Generator) -> FloatArray:
    """``I_m(alpha)`` for every row of ``alpha`` (questions, classes): shape of ``alpha``."""
    alpha = np.asarray(alpha, dtype=np.float64)
    q, m = alpha.shape
    out = np.empty((q, m))
    step = _block_rows(m, draws)
    for lo in range(0, q, step):
        block = alpha[lo : lo + step]
        b = block.shape[0]
        top = _gamma(rng, block, draws).argmax(axis=2)  # (b, draws)
        counts = np.bincount((np.arange(b)[:, None] * m + top).ravel(), minlength=b * m)
        out[lo : lo + b] = counts.reshape(b, m) / draws
    return out


def okg(alpha: FloatArray, *, c: float, draws: int, rng: np.random.Generator) -> OkgEstimate:
    """``h(alpha)`` and ``h(alpha + c e_m)`` for every question and class, in one pass.

    ``alpha``: (questions, classes), entries > 0. Cost: ``2 * questions * classes *
    draws`` Gamma draws and a few array passes of that size; no Python loop over
    questions or classes (only over memory-bounded blocks of questions).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.ndim != 2 or np.any(alpha <= 0):
        raise ValueError("alpha must be a (questions, classes) array of positive entries")
    if c <= 0:
        raise ValueError(f"c must be > 0, got {c}")
    q, m = alpha.shape
    h = np.empty(q)
    bumped = np.empty((q, m))
    classes = np.arange(m)
    step = _block_rows(m, draws)
    for lo in range(0, q, step):
        block = alpha[lo : lo + step]
        b = block.shape[0]
        x = _gamma(rng, block, draws)  # (b, draws, m)
        extra = (
            rng.standard_exponential(size=x.shape)
            if c == 1.0
            else rng.standard_gamma(c, size=x.shape)
        )
        # Top two of each draw: when class j is bumped the winner is j itself or the
        # best of the others, which is the runner-up exactly when j was on top.
        top1 = x.argmax(axis=2)  # (b, draws)
        v1 = np.take_along_axis(x, top1[:, :, None], axis=2)
        np.put_along_axis(x, top1[:, :, None], -np.inf, axis=2)
        top2 = x.argmax(axis=2)
        v2 = np.take_along_axis(x, top2[:, :, None], axis=2)
        np.put_along_axis(x, top1[:, :, None], v1, axis=2)  # restore

        rows = np.arange(b)[:, None] * m
        base_counts = np.bincount((rows + top1).ravel(), minlength=b * m).reshape(b, m)
        h[lo : lo + b] = base_counts.max(axis=1) / draws

        is_top = top1[:, :, None] == classes  # (b, draws, m): bumped class on top?
        rival = np.where(is_top, v2, v1)
        rival_arg = np.where(is_top, top2[:, :, None], top1[:, :, None])
        winner = np.where(x + extra > rival, classes, rival_arg)
        # Count winners per (question, bumped class, winning class).
        cells = (np.arange(b)[:, None, None] * m + classes) * m
        counts = np.bincount((cells + winner).ravel(), minlength=b * m * m).reshape(b, m, m)
        bumped[lo : lo + b] = counts.max(axis=2) / draws
    return OkgEstimate(h=h, bumped=bumped)
