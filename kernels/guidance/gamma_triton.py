"""Triton version of :func:`kernels.guidance.gamma.gamma_reweight_ref`: one fused pass per row.

Grid: one program per guided row. The program walks the vocabulary in blocks; per
block it reads the logits and both head outputs once, computes softplus, the
reliability mask and the Gamma CDF ``P(alpha, lambda x)`` in fp32, and writes
``logit + log F`` back, while it keeps the count of ``F > 0`` and the row's first
argmax. If the count ends at 0 the argmax logit is written back (greedy fallback).
Traffic per row: three reads and one write of ``V`` floats, the floor of any
unfused version.

``P(a, x)`` follows the classic split: the power series for ``x < a + 1`` and the
Lentz continued fraction for ``Q = 1 - P`` otherwise, ``log Gamma`` by the
6-term Lanczos approximation (fp32-friendly coefficients). Both loops run while any
lane of the block has not converged (relative term < 1e-7), at most ``MAX_ITERS``
times; masked-out tokens never enter them, so a block of unreliable tokens costs no
iterations. On CPU the kernel runs only under ``TRITON_INTERPRET=1`` (the tests do
that); it was not compiled on a GPU in this repository's CI.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.guidance.gamma import MIN_MODE_TOKENS, MIN_RATE, MIN_SHAPE
from kernels.guidance.predictor import EPS

_BLOCK = 1024
_MAX_ITERS = 256
_TOL = 1e-7
_FPMIN = 1e-30


@triton.jit
def _lgamma(a):  # type: ignore[no-untyped-def]
    """log Gamma(a) for a > 0 (Lanczos, Numerical Recipes' gammln)."""
    tmp = a + 5.5
    tmp = tmp - (a + 0.5) * tl.log(tmp)
    ser = 1.000000000190015 + 76.18009172947146 / (a + 1.0)
    ser = ser - 86.50532032941677 / (a + 2.0)
    ser = ser + 24.01409824083091 / (a + 3.0)
    ser = ser - 1.231739572450155 / (a + 4.0)
    ser = ser + 0.1208650973866179e-2 / (a + 5.0)
    ser = ser - 0.5395239384953e-5 / (a + 6.0)
    return -tmp + tl.log(2.5066282746310005 * ser / a)


@triton.jit
def _softplus(v):  # type: ignore[no-untyped-def]
    # log(1 + e^v) without overflow: max(v, 0) + log(1 + e^-|v|).
    return tl.maximum(v, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(v)))


@triton.jit  # type: ignore[untyped-decorator]
def _gammainc_p(a, x, active, TOL: tl.constexpr, FPMIN: tl.constexpr, MAX_ITERS: tl.constexpr):  # type: ignore[no-untyped-def]
    """Regularised lower incomplete gamma P(a, x) on the ``active`` lanes (0 elsewhere)."""
    x_safe = tl.maximum(x, FPMIN)
    log_pref = a * tl.log(x_safe) - x_safe - _lgamma(a)
    use_series = active & (x < a + 1.0)
    use_cf = active & (x >= a + 1.0)

    # Series: P = pref / a * sum_n x^n / ((a+1)...(a+n)).
    ap = a
    term = tl.where(use_series, 1.0 / a, 0.0)
    total = term
    err = tl.max(tl.where(use_series, 1.0, 0.0), axis=0)
    it = 0
    while (err > TOL) & (it < MAX_ITERS):
        ap = ap + 1.0
        term = term * x / ap
        total = total + term
        err = tl.max(tl.where(use_series, tl.abs(term) / tl.maximum(total, FPMIN), 0.0), axis=0)
        it += 1
    p_series = total * tl.exp(log_pref)

    # Continued fraction (modified Lentz) for Q = pref * h.
    b = x + 1.0 - a
    c = tl.full(b.shape, 1.0 / FPMIN, tl.float32)
    d = 1.0 / tl.where(tl.abs(b) < FPMIN, FPMIN, b)
    h = d
    err = tl.max(tl.where(use_cf, 1.0, 0.0), axis=0)
    i = 1
    while (err > TOL) & (i < MAX_ITERS):
        an = -i * (i - a)
        b = b + 2.0
        d = an * d + b
        d = tl.where(tl.abs(d) < FPMIN, FPMIN, d)
        c = b + an / c
        c = tl.where(tl.abs(c) < FPMIN, FPMIN, c)
        d = 1.0 / d
        delta = d * c
        h = tl.where(use_cf, h * delta, h)
        err = tl.max(tl.where(use_cf, tl.abs(delta - 1.0), 0.0), axis=0)
        i += 1
    p_cf = 1.0 - tl.exp(log_pref) * h

    p = tl.where(use_series, p_series, tl.where(use_cf, p_cf, 0.0))
    # x = +inf (an overflowing rate): P = 1, where the formulas above give NaN.
    p = tl.where(active & (x > 3.0e38), 1.0, p)
    return tl.minimum(tl.maximum(p, 0.0), 1.0)


@triton.jit  # type: ignore[untyped-decorator]
def _gamma_reweight_kernel(  # type: ignore[no-untyped-def]
    logits_ptr,
    logits_stride,
    rows_ptr,
    a_ptr,
    l_ptr,
    head_stride,
    budget_ptr,
    mask_ptr,
    vocab_size,
    HAS_ROWS: tl.constexpr,
    EPS_: tl.constexpr,
    MIN_RATE_: tl.constexpr,
    MIN_SHAPE_: tl.constexpr,
    MIN_MODE_: tl.constexpr,
    TOL: tl.constexpr,
    FPMIN: tl.constexpr,
    MAX_ITERS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    g = tl.program_id(0).to(tl.int64)
    budget = tl.load(budget_ptr + g)
    if budget <= 0:
        return
    if HAS_ROWS:  # noqa: SIM108  (a constexpr branch, compiled out)
        row = tl.load(rows_ptr + g).to(tl.int64)
    else:
        row = g
    use_mask = tl.load(mask_ptr + g)
    x = tl.log(1.0 + budget.to(tl.float32))
    row_ptr = logits_ptr + row * logits_stride
    best_val = float("-inf")
    best_idx = 0
    nnz = 0
    for start in range(0, vocab_size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inb = offs < vocab_size
        logit = tl.load(row_ptr + offs, mask=inb, other=float("-inf"))
        a = _softplus(tl.load(a_ptr + g * head_stride + offs, mask=inb, other=0.0)) + EPS_
        lam = _softplus(tl.load(l_ptr + g * head_stride + offs, mask=inb, other=0.0)) + EPS_
        mode_tokens = tl.exp((a - 1.0) / lam) - 1.0
        reliable = (lam >= MIN_RATE_) & (a > MIN_SHAPE_) & (mode_tokens >= MIN_MODE_)
        keep = inb & (reliable | (use_mask == 0))
        f = _gammainc_p(a, lam * x, keep, TOL, FPMIN, MAX_ITERS)
        f = tl.where(f == f, f, 0.0)  # NaN -> 0, as the reference does
        nnz += tl.sum((f > 0.0).to(tl.int32), axis=0)
        # First argmax of the row: strict > keeps the earlier block on ties.
        block_max = tl.max(logit, axis=0)
        block_idx = tl.min(tl.where(logit == block_max, offs, vocab_size), axis=0)
        better = block_max > best_val
        best_idx = tl.where(better, block_idx, best_idx)
        best_val = tl.where(better, block_max, best_val)
        out = tl.where(f > 0.0, logit + tl.log(f), float("-inf"))
        tl.store(row_ptr + offs, out, mask=inb)
    if nnz == 0:
        tl.store(row_ptr + best_idx, best_val)


def gamma_reweight_triton(
    logits: torch.Tensor,
    rows: torch.Tensor | None,
    a_raw: torch.Tensor,
    l_raw: torch.Tensor,
    budget: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """Launch :func:`_gamma_reweight_kernel` in place; same contract as the torch op.

    ``logits`` fp32 with unit stride along the vocab; ``a_raw``/``l_raw`` fp32 ``[G, V]``
    with the same strides; ``budget``/``mask`` int32 ``[G]``.
    """
    num = a_raw.shape[0]
    if num == 0:
        return logits
    vocab = logits.shape[1]
    a_raw = a_raw.float().contiguous()
    l_raw = l_raw.float().contiguous()
    assert logits.stride(1) == 1 and logits.dtype == torch.float32
    assert a_raw.shape == l_raw.shape == (num, vocab)
    _gamma_reweight_kernel[(num,)](
        logits,
        logits.stride(0),
        rows if rows is not None else budget,  # unused without rows
        a_raw,
        l_raw,
        a_raw.stride(0),
        budget.to(torch.int32).contiguous(),
        mask.to(torch.int32).contiguous(),
        vocab,
        HAS_ROWS=rows is not None,
        EPS_=EPS,
        MIN_RATE_=MIN_RATE,
        MIN_SHAPE_=MIN_SHAPE,
        MIN_MODE_=MIN_MODE_TOKENS,
        TOL=_TOL,
        FPMIN=_FPMIN,
        MAX_ITERS=_MAX_ITERS,
        BLOCK=_BLOCK,
    )
    return logits
