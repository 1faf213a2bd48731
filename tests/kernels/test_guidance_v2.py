"""The Model Runner V2 budget-guidance adapter on hand-built step contexts (CPU).

V2 needs Triton and CUDA to run inside vLLM, so its contract is checked here the way the
Elastic V2 adapter's is: the real class, a synthetic ``LogitsProcRequestState`` and
``LogitsContext`` per step, rows mapped to slots in a shuffled order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from guidance_fixtures import (
    HIDDEN,
    NEWLINE,
    OTHER,
    THINK_END,
    VOCAB,
    expected_row,
    installed,
    tiny_predictor,
    v2_processor,
)
from vllm import SamplingParams
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

from kernels.guidance import args as guidance_args
from kernels.guidance.stash import STASH
from kernels.guidance.vllm_v2 import BudgetGuidanceLogitsProcessorV2

PROMPT_LEN = 6


def _processor(slots: int) -> tuple[BudgetGuidanceLogitsProcessorV2, Any]:
    return v2_processor(slots, PROMPT_LEN)


def _ctx(slots: list[int], last_tokens: list[int], generated: list[int]) -> LogitsContext:
    """Row i: slot slots[i], fed token last_tokens[i], with generated[i] tokens so far."""
    mapping = torch.tensor(slots, dtype=torch.int32)
    pos = torch.tensor([PROMPT_LEN - 1 + g for g in generated], dtype=torch.int64)
    return LogitsContext(
        expanded_idx_mapping=mapping,
        idx_mapping=mapping,
        idx_mapping_np=mapping.numpy(),
        expanded_local_pos=torch.zeros(len(slots), dtype=torch.int32),
        input_ids=torch.tensor(last_tokens, dtype=torch.int32),
        pos=pos,
        seq_lens_upper_bound_np=(pos + 1).numpy(),
    )


def _apply(
    proc: BudgetGuidanceLogitsProcessorV2, ctx: LogitsContext, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    rows = ctx.expanded_idx_mapping.shape[0]
    hidden = torch.randn(rows, HIDDEN, generator=gen)
    logits = torch.randn(rows, VOCAB, generator=gen)
    before = logits.clone()
    STASH.put(hidden)
    return before, proc.apply(logits, ctx), hidden


def test_v2_step_rules_on_the_device_state() -> None:
    predictor = tiny_predictor(2)
    with installed(predictor):
        proc, _ = _processor(4)
        assert proc.add_request(3, SamplingParams(extra_args={guidance_args.BUDGET: 6}))
        assert not proc.add_request(1, SamplingParams())
        assert not proc.add_request(2, SamplingParams(extra_args={guidance_args.BUDGET: 0}))
        proc.apply_staged_writes()
        # First step of every row (rows in shuffled slot order): only slot 3 is guided.
        before, after, h = _apply(proc, _ctx([1, 3, 2], [OTHER, OTHER, OTHER], [0, 0, 0]), 0)
        torch.testing.assert_close(after[1], expected_row(predictor, before[1], h[1], 6))
        assert torch.equal(after[0], before[0]) and torch.equal(after[2], before[2])
        # Slot 3 fed a plain token: no boundary.
        before, after, _ = _apply(proc, _ctx([3, 1], [OTHER, NEWLINE], [1, 1]), 1)
        assert torch.equal(after, before)
        # A newline after 4 tokens: b = 6 - 4.
        before, after, h = _apply(proc, _ctx([3], [NEWLINE], [4]), 2)
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 2))
        # Over budget: floored at 1.
        before, after, h = _apply(proc, _ctx([3], [NEWLINE], [20]), 3)
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 1))
        # </think> fed: closed from now on, even at later newlines.
        before, after, _ = _apply(proc, _ctx([3], [THINK_END], [21]), 4)
        assert torch.equal(after, before)
        before, after, _ = _apply(proc, _ctx([3], [NEWLINE], [23]), 5)
        assert torch.equal(after, before)
        # A partial prefill chunk (negative generated count) is never guided.
        assert proc.add_request(0, SamplingParams(extra_args={guidance_args.BUDGET: 6}))
        proc.apply_staged_writes()
        before, after, _ = _apply(proc, _ctx([0], [OTHER], [-3]), 6)
        assert torch.equal(after, before)
        # Slot reuse resets CLOSED: slot 3 taken by a new guided request.
        assert proc.add_request(3, SamplingParams(extra_args={guidance_args.BUDGET: 9}))
        proc.apply_staged_writes()
        before, after, h = _apply(proc, _ctx([3], [OTHER], [0]), 7)
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 9))


def test_v2_batch_without_guided_slots_returns_at_once_and_never_raises() -> None:
    predictor = tiny_predictor(3)
    with installed(predictor):
        proc, _ = _processor(2)
        proc.add_request(0, SamplingParams())
        proc.apply_staged_writes()
        before, after, _ = _apply(proc, _ctx([0], [OTHER], [0]), 0)
        assert torch.equal(after, before)

        def broken(h: torch.Tensor) -> Any:
            raise RuntimeError("predictor exploded")

        proc.add_request(1, SamplingParams(extra_args={guidance_args.BUDGET: 3}))
        proc.apply_staged_writes()
        predictor.raw = broken  # type: ignore[method-assign]
        before, after, _ = _apply(proc, _ctx([1], [OTHER], [0]), 1)
        assert torch.equal(after, before)
    assert np.all(proc._active_np[[1]] == 1)
