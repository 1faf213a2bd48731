"""Budget-guidance reweighting: ``logits += log Pr(L <= b | v)`` on the guided rows.

For guided row ``g`` (logits row ``rows[g]``, remaining budget ``b = budget[g] >= 1``)
and every token ``v``, with ``alpha = softplus(a_raw) + EPS``, ``lambda = softplus(l_raw)
+ EPS`` (the predictor's head outputs, :mod:`kernels.guidance.predictor`):

* ``F_v = P(alpha_v, lambda_v * log(1 + b))``: the Gamma CDF at ``x = log(1 + b)``
  (``P`` is the regularised lower incomplete gamma function);
* with the reliability mask on (``mask[g] != 0``), ``F_v = 0`` unless ``lambda_v >= 10``,
  ``alpha_v > 1`` and ``exp((alpha_v - 1) / lambda_v) - 1 >= 0.9`` (the Gamma mode,
  mapped back to tokens, is at least 0.9);
* ``F`` is clipped to [0, 1]; if every ``F_v`` is 0 the row falls back to greedy:
  ``F = 1`` at the argmax of the row's logits, 0 elsewhere;
* ``logits[rows[g], v] += log F_v`` (``-inf`` where ``F_v = 0``).

Softmax of the result is ``p * F / sum(p * F)``: the spec's ``p(y) Pr(L <= b | y)``
renormalised (normalising ``F`` first, as the reference code does, cancels out).
Tokens whose logit is ``-inf`` (p = 0) stay ``-inf``. Rows with ``budget[g] <= 0`` are
left untouched bit for bit (the Model Runner V2 adapter passes every row and marks the
unguided ones that way).

This module is the spec and the torch reference (:func:`gamma_reweight_ref`,
``torch.special.gammainc``); :mod:`kernels.guidance.gamma_triton` is the CUDA kernel;
:mod:`kernels.guidance.reweight` picks one per tensor. Both run in place with no host
sync and no per-row Python loop.
"""

from __future__ import annotations

from typing import Final

import torch
from torch.nn import functional as F

from kernels.guidance.predictor import EPS

# The spec's reliability thresholds (hard-coded there too).
MIN_RATE: Final = 10.0
MIN_SHAPE: Final = 1.0
MIN_MODE_TOKENS: Final = 0.9


def gamma_cdf(alpha: torch.Tensor, rate: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``Pr(X <= x)`` for ``X ~ Gamma(alpha, rate)``, elementwise (broadcasting)."""
    out: torch.Tensor = torch.special.gammainc(alpha, rate * x)
    return out


def reliability_mask(alpha: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
    """The spec's mask: confident (rate >= 10), unimodal (alpha > 1), mode >= 0.9 tokens."""
    mode_tokens = torch.expm1((alpha - 1.0) / rate)
    return (rate >= MIN_RATE) & (alpha > MIN_SHAPE) & (mode_tokens >= MIN_MODE_TOKENS)


def guidance_factor(
    logits: torch.Tensor,
    alpha: torch.Tensor,
    rate: torch.Tensor,
    budget: torch.Tensor,
    mask: torch.Tensor | bool = True,
) -> torch.Tensor:
    """``[G, V]`` factors ``F`` (clipped, masked, all-zero fallback) for ``[G, V]`` logits.

    ``budget`` is ``[G]`` (int or float, may be ``inf``); ``mask`` is a bool or ``[G]``.
    """
    x = torch.log1p(budget.to(torch.float32)).unsqueeze(1)
    f = gamma_cdf(alpha.float(), rate.float(), x)
    keep = reliability_mask(alpha.float(), rate.float())
    if isinstance(mask, bool):
        if not mask:
            keep = torch.ones_like(keep)
    else:
        keep = keep | (mask.reshape(-1, 1) == 0)
    f = torch.where(keep, f, torch.zeros_like(f))
    # A NaN from a broken predictor must not reach the sampler: treat it as F = 0.
    f = torch.nan_to_num(f, nan=0.0).clamp_(0.0, 1.0)
    all_zero = (f > 0).sum(dim=1, keepdim=True) == 0
    top = torch.zeros_like(f).scatter_(1, logits.argmax(dim=1, keepdim=True), 1.0)
    return torch.where(all_zero, top, f)


def gamma_reweight_ref(
    logits: torch.Tensor,
    rows: torch.Tensor | None,
    a_raw: torch.Tensor,
    l_raw: torch.Tensor,
    budget: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Apply the reweighting in place with torch ops; returns ``logits``.

    ``logits`` ``[R, V]`` fp32; ``rows`` ``[G]`` int (None: rows ``0..G-1``);
    ``a_raw``/``l_raw`` ``[G, V]`` head outputs; ``budget``, ``mask`` ``[G]`` int.
    """
    num = a_raw.shape[0]
    if num == 0:
        return logits
    idx = (
        torch.arange(num, device=logits.device)
        if rows is None
        else rows.to(device=logits.device, dtype=torch.int64)
    )
    sub = logits.index_select(0, idx)
    alpha = F.softplus(a_raw.float()) + EPS
    rate = F.softplus(l_raw.float()) + EPS
    guided = budget > 0
    b = torch.where(guided, budget, torch.ones_like(budget))
    factor = guidance_factor(sub, alpha, rate, b, mask)
    new = torch.where(guided.unsqueeze(1), sub + torch.log(factor), sub)
    logits.index_copy_(0, idx, new)
    return logits
