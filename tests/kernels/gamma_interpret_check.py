"""The budget-guidance Triton kernel vs the torch reference on CPU tensors.

Run by test_gamma_triton.py in a child process with TRITON_INTERPRET=1 (the variable
must be set before triton is imported and must not leak into vLLM engines). Exit status
0 and a last line "ok <cases>" when every case matches.
"""

from __future__ import annotations

import os
import random
import sys

import torch

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

from kernels.guidance.gamma import gamma_reweight_ref  # noqa: E402
from kernels.guidance.gamma_triton import gamma_reweight_triton  # noqa: E402
from kernels.guidance.predictor import inverse_softplus  # noqa: E402


def raw_of(value: torch.Tensor) -> torch.Tensor:
    """Head outputs whose softplus is ``value`` (softplus(v) == v in fp32 beyond 20)."""
    small = torch.log(torch.expm1(value.clamp_max(20.0)).clamp_min(1e-30))
    return torch.where(value > 20.0, value, small)


def case(rng: random.Random, gen: torch.Generator) -> tuple[bool, str]:
    num_rows = rng.randint(1, 6)
    vocab = rng.choice([1, 7, 37, 100, 1000, 1025, 2049, 3001])
    guided = rng.randint(1, num_rows)
    rows = torch.randperm(num_rows, generator=gen)[:guided] if rng.random() < 0.7 else None
    if rows is None:
        guided = num_rows
    logits = torch.randn(num_rows, vocab, generator=gen) * 3
    logits[torch.rand(num_rows, vocab, generator=gen) < 0.1] = float("-inf")
    # Shapes from the predictor's realistic range and beyond: alpha up to ~2000.
    log_alpha = torch.empty(guided, vocab).uniform_(-2.0, 7.6, generator=gen)
    log_rate = torch.empty(guided, vocab).uniform_(-1.0, 6.0, generator=gen)
    a_raw, l_raw = raw_of(log_alpha.exp()), raw_of(log_rate.exp())
    if rng.random() < 0.2:  # a row where the mask removes everything: greedy fallback
        a_raw[0] = inverse_softplus(0.5)
    budget = torch.randint(-2, 3000, (guided,), generator=gen, dtype=torch.int32)
    if rng.random() < 0.3:
        budget[0] = 0  # an unguided row inside the batch (Model Runner V2 does this)
    mask = torch.randint(0, 2, (guided,), generator=gen, dtype=torch.int32)
    ref, tri = logits.clone(), logits.clone()
    gamma_reweight_ref(ref, rows, a_raw, l_raw, budget, mask)
    gamma_reweight_triton(tri, rows, a_raw, l_raw, budget, mask)
    # F below fp32's normal range is 0 in one and a denormal in the other: both mean
    # "never sampled". Compare the -inf pattern and values above that floor.
    floor = -60.0
    zero_ref, zero_tri = ~(ref > floor), ~(tri > floor)
    same_inf = torch.equal(zero_ref, zero_tri)
    finite = ~zero_ref & ~zero_tri
    # Compare the factors F = exp(new - old) in linear space: for tiny F, torch's fp32
    # gammainc is the less accurate of the two (checked against scipy in float64).
    f_ref = torch.exp(ref[finite] - logits[finite])
    f_tri = torch.exp(tri[finite] - logits[finite])
    err = (f_ref - f_tri).abs()
    close = bool((err <= 1e-5 + 2e-3 * f_ref).all())
    p_ref, p_tri = torch.softmax(ref, 1), torch.softmax(tri, 1)
    p_close = bool(torch.nan_to_num(p_ref - p_tri).abs().max() <= 1e-4)
    max_err = float(err.max()) if err.numel() else 0.0
    info = f"rows={num_rows} vocab={vocab} guided={guided} maxerr={max_err:.2e}"
    info += f" same_inf={same_inf} close={close} p_close={p_close}"
    if not same_inf:
        bad = zero_ref != zero_tri
        info += f" ref={ref[bad][:5].tolist()} tri={tri[bad][:5].tolist()}"
    return same_inf and close and p_close, info


def main() -> int:
    seed, cases = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for i in range(cases):
        ok, info = case(rng, gen)
        if not ok:
            print(f"case {i} mismatch: {info}")
            return 1
    print(f"ok {cases}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
