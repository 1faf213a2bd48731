"""The reweighting op's contract (docs/specs.md §2, "Testable"), on the torch op."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special

from kernels.guidance.gamma import gamma_cdf, gamma_reweight_ref, guidance_factor, reliability_mask
from kernels.guidance.predictor import activate, inverse_softplus


def _heads(gen: torch.Generator, rows: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Head outputs whose Gammas straddle the reliability thresholds."""
    a = torch.empty(rows, vocab).uniform_(-1.0, 60.0, generator=gen)
    r = torch.empty(rows, vocab).uniform_(-1.0, 40.0, generator=gen)
    return a, r


def test_gamma_cdf_matches_scipy() -> None:
    gen = torch.Generator().manual_seed(0)
    alpha = torch.empty(2000, dtype=torch.float64).uniform_(0.05, 300.0, generator=gen)
    rate = torch.empty(2000, dtype=torch.float64).uniform_(0.05, 80.0, generator=gen)
    x = torch.empty(2000, dtype=torch.float64).uniform_(0.1, 8.0, generator=gen)
    ours = gamma_cdf(alpha, rate, x).numpy()
    np.testing.assert_allclose(
        ours, special.gammainc(alpha.numpy(), (rate * x).numpy()), atol=1e-12
    )


def test_reliability_mask_thresholds() -> None:
    alpha = torch.tensor([30.0, 30.0, 1.0, 1.5, 30.0])
    rate = torch.tensor([10.0, 9.99, 20.0, 20.0, 100.0])
    # mode tokens: expm1(29/10)=17.2; rate < 10; alpha == 1; expm1(0.5/20)=0.025; expm1(0.29)
    assert reliability_mask(alpha, rate).tolist() == [True, False, False, False, False]


@pytest.mark.parametrize("masked", [True, False])
def test_factor_non_decreasing_in_remaining_budget(masked: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    a, r = _heads(gen, 6, 300)
    alpha, rate = activate(a), activate(r)
    logits = torch.randn(6, 300, generator=gen)
    prev: torch.Tensor | None = None
    for b in (1, 2, 3, 5, 8, 20, 50, 100, 1000, 10**6):
        f = guidance_factor(logits, alpha, rate, torch.full((6,), b), masked)
        pure = gamma_cdf(alpha, rate, torch.tensor(math.log1p(b)))
        if prev is not None:
            assert bool((pure >= prev - 1e-7).all())
        prev = pure
        # Where no fallback happened, the factor is the (masked) CDF itself.
        keep = reliability_mask(alpha, rate) if masked else torch.ones_like(pure, dtype=torch.bool)
        normal = ((pure * keep) > 0).any(dim=1)
        assert torch.equal(f[normal], (pure * keep)[normal].clamp(0, 1))


def test_zero_probability_tokens_stay_zero_and_output_is_normalised() -> None:
    gen = torch.Generator().manual_seed(2)
    a, r = _heads(gen, 5, 257)
    logits = torch.randn(5, 257, generator=gen) * 2
    logits[torch.rand(5, 257, generator=gen) < 0.3] = float("-inf")
    before = logits.clone()
    budget = torch.tensor([1, 3, 10, 40, 400], dtype=torch.int32)
    gamma_reweight_ref(logits, None, a, r, budget, torch.ones(5, dtype=torch.int32))
    assert bool(torch.isneginf(logits[torch.isneginf(before)]).all())
    p = torch.softmax(logits, dim=1)
    assert bool(torch.isfinite(p).all())
    torch.testing.assert_close(p.sum(dim=1), torch.ones(5))
    # And it is p * F renormalised: the spec's p(y) Pr(L <= b | y).
    f = guidance_factor(before, activate(a), activate(r), budget, True)
    pf = torch.softmax(before, dim=1) * f
    torch.testing.assert_close(p, pf / pf.sum(dim=1, keepdim=True))


def test_all_factors_zero_gives_a_greedy_step() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 50, generator=gen)
    # alpha < 1 everywhere: the mask removes every token.
    a = torch.full((3, 50), inverse_softplus(0.5))
    r = torch.full((3, 50), inverse_softplus(20.0))
    before = logits.clone()
    gamma_reweight_ref(logits, None, a, r, torch.full((3,), 5), torch.ones(3, dtype=torch.int32))
    for row in range(3):
        finite = torch.isfinite(logits[row]).nonzero().flatten().tolist()
        top = int(before[row].argmax())
        assert finite == [top]
        assert float(logits[row, top]) == float(before[row, top])


def test_infinite_budget_leaves_the_pure_formula_unchanged_but_not_the_masked_one() -> None:
    gen = torch.Generator().manual_seed(4)
    a, r = _heads(gen, 4, 200)
    logits = torch.randn(4, 200, generator=gen)
    inf = torch.full((4,), math.inf)
    pure = guidance_factor(logits, activate(a), activate(r), inf, False)
    assert bool((pure == 1.0).all())
    out = logits.clone()
    # Through the op, mask off: bit-identical logits.
    gamma_reweight_ref(out, None, a, r, inf, torch.zeros(4, dtype=torch.int32))
    assert torch.equal(out, logits)
    masked = guidance_factor(logits, activate(a), activate(r), inf, True)
    assert bool((masked == 0).any()), "the mask still zeroes unreliable tokens at B = inf"


def test_unguided_rows_and_other_rows_are_untouched() -> None:
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 90, generator=gen)
    before = logits.clone()
    rows = torch.tensor([4, 1, 3])
    a, r = _heads(gen, 3, 90)
    budget = torch.tensor([2, 0, 7], dtype=torch.int32)  # row 1 is not guided this step
    gamma_reweight_ref(logits, rows, a, r, budget, torch.ones(3, dtype=torch.int32))
    for row in (0, 1, 2, 5):
        assert torch.equal(logits[row], before[row])
    assert not torch.equal(logits[4], before[4])
    assert not torch.equal(logits[3], before[3])


def test_nan_predictions_never_reach_the_sampler() -> None:
    logits = torch.randn(2, 30)
    a = torch.full((2, 30), float("nan"))
    r = torch.full((2, 30), 3.0)
    gamma_reweight_ref(logits, None, a, r, torch.tensor([3, 3]), torch.tensor([0, 1]))
    assert not bool(torch.isnan(logits).any())
    assert bool(torch.isfinite(torch.softmax(logits, 1)).all())
