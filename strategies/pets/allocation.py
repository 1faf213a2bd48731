"""Online PETS: the bucket budget plan (max-heap greedy, docs/specs.md §4 step 5).

Every bucket starts at ``K0``. The bucket with the largest marginal gain
``Delta_t = Phi(a_t sqrt(B_t + 1) + b_t) - Phi(a_t sqrt(B_t) + b_t) > 0`` gets one more
sample, unless that would push the expected budget ``sum_t pi_t B_t`` over the average
budget (the bucket is then dropped: the sum only grows, so it never fits again), and
no bucket passes ``B_max``.

Gains are compared as ``log Delta`` computed from ``logsf``: ``Phi`` saturates in
float64 long before the gain is really zero, and a bucket with ``a_t > 0`` must keep a
positive gain (so that ``B_bar >= B_max`` gives it ``B_max``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from scipy.stats import norm

# Slack for float sums of pi_t * B_t against the average budget.
_TOL = 1e-9


def log_gain(a: float, b: float, k: int) -> float:
    """``log(Phi(a sqrt(k+1) + b) - Phi(a sqrt(k) + b))``; ``-inf`` when ``a <= 0``."""
    if a <= 0:
        return -math.inf
    lo, hi = a * math.sqrt(k) + b, a * math.sqrt(k + 1) + b
    # Phi(hi) - Phi(lo) = sf(lo) - sf(hi) = sf(lo) * (1 - sf(hi)/sf(lo)); exact in logs.
    log_lo, log_hi = float(norm.logsf(lo)), float(norm.logsf(hi))
    if not log_hi < log_lo:
        return -math.inf  # below float resolution: no measurable gain
    return log_lo + math.log(-math.expm1(log_hi - log_lo))


def allocate(
    pi: Sequence[float],
    a: Sequence[float],
    b: Sequence[float],
    *,
    average_budget: float,
    k0: int,
    b_max: int,
) -> tuple[int, ...]:
    """Samples per bucket. ``k0 <= B_t <= b_max``; ``sum pi_t B_t <= max(B_bar, k0)``."""
    if not len(pi) == len(a) == len(b):
        raise ValueError("pi, a and b need one entry per bucket")
    if k0 < 1 or b_max < k0:
        raise ValueError(f"need 1 <= k0 <= b_max, got k0={k0}, b_max={b_max}")
    budgets = [k0] * len(pi)
    spent = k0 * float(sum(pi))
    heap = [(-log_gain(a[t], b[t], k0), t) for t in range(len(pi)) if k0 < b_max]
    heap = [item for item in heap if math.isfinite(item[0])]
    heapq.heapify(heap)
    while heap:
        _, t = heapq.heappop(heap)
        if spent + pi[t] > average_budget + _TOL:
            continue  # never fits again: the expected budget only grows
        budgets[t] += 1
        spent += pi[t]
        if budgets[t] < b_max:
            heapq.heappush(heap, (-log_gain(a[t], b[t], budgets[t]), t))
    return tuple(budgets)
