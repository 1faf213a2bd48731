"""Shared pieces of the budget-guidance processor tests: a tiny installed predictor."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch

from kernels.guidance.gamma import gamma_reweight_ref
from kernels.guidance.predictor import BudgetPredictor, PredictorConfig
from kernels.guidance.stash import STASH, GuidanceModel

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


def v2_processor(
    slots: int, prompt_len: int, history: torch.Tensor | None = None
) -> tuple[Any, Any]:
    """A Model Runner V2 guidance processor over hand-built request states (and, with
    ``history``, their committed tokens); returns (processor, request states)."""
    from kernels.guidance.vllm_v2 import BudgetGuidanceLogitsProcessorV2

    lengths = torch.full((slots,), prompt_len, dtype=torch.int32)
    req_states: Any = SimpleNamespace(
        device=torch.device("cpu"),
        max_num_reqs=slots,
        vocab_size=VOCAB,
        prompt_len=SimpleNamespace(gpu=lengths, np=lengths.numpy()),
    )
    if history is not None:
        req_states.all_token_ids = SimpleNamespace(gpu=history)
    # No VllmConfig: the adapter reads nothing from it on these hand-built batches.
    return BudgetGuidanceLogitsProcessorV2(None, req_states), req_states  # type: ignore[arg-type]
