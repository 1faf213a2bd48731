"""Trace confidence (DeepConf, Fu et al. 2025): pure functions over per-token values.

* token confidence ``C_i = -mean(top-k logprobs at step i)``: high when the model's
  distribution is peaked (the top candidates other than the sampled one are unlikely);
* group confidence: the mean of ``C_i`` over a sliding window of the last ``w`` tokens
  (a trace shorter than ``w`` has one group: all of it);
* a trace's confidence: its lowest group confidence (DeepConf's "lowest group"), the
  measure both the online threshold and the confidence-weighted vote use here.

The engine reports ``C_i`` per generated token when ``SamplingConfig.top_logprobs = k``
(``token_confidence`` below is that computation, shared by every engine); the logits
processor ``kernels.confidence`` computes the same quantity from the raw logits inside
the engine and stops a trace whose group confidence falls below a threshold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Final

# vLLM serves at most 20 logprobs per token by default (ModelConfig.max_logprobs).
MAX_TOP_K: Final = 20
# A -inf logprob (a candidate masked by another processor) would make the mean -inf; it
# is clamped so that one masked step cannot dominate a window.
MIN_LOGPROB: Final = -100.0


def token_confidence(logprobs: Iterable[float], k: int) -> float:
    """``-mean`` of the ``k`` largest of ``logprobs`` (all of them when fewer are given).

    vLLM returns the top-k candidates plus the sampled token when it is not among them;
    only the top k count, as in DeepConf. An empty input is 0 (no information).
    """
    # NaN (a broken logit) and -inf count as the floor: one step must not poison a window.
    top = sorted((_floored(x) for x in logprobs), reverse=True)[:k]
    return -sum(top) / len(top) if top else 0.0


def _floored(x: float) -> float:
    x = float(x)
    return MIN_LOGPROB if math.isnan(x) else max(x, MIN_LOGPROB)


def group_confidences(confidences: Sequence[float], window: int) -> list[float]:
    """Mean confidence of every complete window of ``window`` tokens (one group of all
    tokens when the trace is shorter)."""
    if window < 1:
        raise ValueError("window must be >= 1")
    n = len(confidences)
    if n == 0:
        return []
    if n <= window:
        return [sum(confidences) / n]
    out: list[float] = []
    total = sum(confidences[:window])
    out.append(total / window)
    for i in range(window, n):
        total += confidences[i] - confidences[i - window]
        out.append(total / window)
    return out


def lowest_group(confidences: Sequence[float], window: int) -> float:
    """A trace's confidence: its lowest group confidence (``-inf`` when it has no tokens,
    so an empty trace never outranks a real one)."""
    groups = group_confidences(confidences, window)
    return min(groups) if groups else -math.inf


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError("q must be in [0, 100]")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def keep_top(confidences: Sequence[float], share: float) -> list[int]:
    """Positions of the ``ceil(share * n)`` most confident traces (at least one), in pool
    order; ties keep the earlier trace."""
    if not 0.0 < share <= 1.0:
        raise ValueError("share must be in (0, 1]")
    n = len(confidences)
    keep = max(1, math.ceil(share * n)) if n else 0
    ranked = sorted(range(n), key=lambda i: (-confidences[i], i))[:keep]
    return sorted(ranked)
