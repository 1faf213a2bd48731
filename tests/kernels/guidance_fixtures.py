"""Shared pieces of the budget-guidance processor tests: a tiny installed predictor."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from kernels.gamma import gamma_reweight_ref
from kernels.guidance_stash import STASH, GuidanceModel
from kernels.predictor import BudgetPredictor, PredictorConfig

VOCAB = 23
HIDDEN = 16
THINK_END = 4
NEWLINE = 7
OTHER = 9


def tiny_predictor(seed: int = 0) -> BudgetPredictor:
    """Random weights, biases placed so most tokens pass the reliability mask."""
    torch.manual_seed(seed)
    config = PredictorConfig(
        hidden_size=HIDDEN,
        vocab_size=VOCAB,
        width=8,
        rank=4,
        think_end_id=THINK_END,
        boundary_token_ids=(NEWLINE,),
    )
    p = BudgetPredictor(config)
    with torch.no_grad():
        p.alpha_up.bias.uniform_(20.0, 60.0)
        p.rate_up.bias.uniform_(10.0, 30.0)
    return p.eval()


@contextmanager
def installed(predictor: BudgetPredictor | None) -> Iterator[None]:
    """The predictor installed in the stash as the wrapper model would; restored after."""
    before = STASH.model
    if predictor is None:
        STASH.install(None)
    else:
        boundary = torch.zeros(VOCAB, dtype=torch.bool)
        boundary[NEWLINE] = True
        STASH.install(
            GuidanceModel(
                predictor=predictor,
                think_end_id=THINK_END,
                boundary=boundary,
                boundary_ids=frozenset({NEWLINE}),
            )
        )
    try:
        yield
    finally:
        STASH.install(before)
        STASH.take(0)


@torch.no_grad()
def expected_row(
    predictor: BudgetPredictor, logits: torch.Tensor, hidden: torch.Tensor, b: int
) -> torch.Tensor:
    """What one guided row must become with remaining budget ``b`` (mask on)."""
    a, r = predictor.raw(hidden.unsqueeze(0))
    out = logits.clone().unsqueeze(0)
    gamma_reweight_ref(
        out, None, a, r, torch.tensor([b], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
    )
    return out[0]
