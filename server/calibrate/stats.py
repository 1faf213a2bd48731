"""The intervals the fit and its judgment report: Wilson's for a row's accuracy, a paired
t interval for the difference of two plans over the same distinct questions."""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959964


def wilson(right: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The 95% Wilson interval of ``right`` of ``n`` (0..1 for n = 0)."""
    if n == 0:
        return 0.0, 1.0
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _t95(df: int) -> float:
    """Student's t at 97.5% (two-sided 95%) for ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Mean of a - b over paired questions (outcomes as 0/1, or per-question means) and
    its 95% interval (t, over the questions)."""
    if len(a) != len(b):
        raise ValueError("paired outcomes differ in length")
    n = len(a)
    if n == 0:
        return 0.0, -1.0, 1.0
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    mean = sum(d) / n
    if n < 2:
        return mean, -1.0, 1.0
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = _t95(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
