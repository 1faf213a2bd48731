"""The V1 budget-guidance processor on hand-built batch updates (no engine).

The step rules of docs/specs.md §2: guidance at the first step and after newline
tokens only, while thinking, with b = max(1, B - thinking tokens so far); nothing after
``</think>``; unguided rows bit-identical; apply() never raises.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
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
)
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from kernels.guidance import args as guidance_args
from kernels.guidance.stash import STASH
from kernels.guidance.vllm_v1 import BudgetGuidanceLogitsProcessor


def _processor(capacity: int = 8) -> BudgetGuidanceLogitsProcessor:
    config: Any = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=capacity))
    return BudgetGuidanceLogitsProcessor(config, torch.device("cpu"), False)


def _params(budget: int | None, **extra: int) -> SamplingParams:
    args: dict[str, Any] = dict(extra)
    if budget is not None:
        args[guidance_args.BUDGET] = budget
    return SamplingParams(extra_args=args or None)


def _step(
    proc: BudgetGuidanceLogitsProcessor, rows: int, update: BatchUpdate | None = None, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One engine step: update_state, stash the hidden states, apply. Returns (before,
    after, hidden)."""
    gen = torch.Generator().manual_seed(seed)
    proc.update_state(update)
    hidden = torch.randn(rows, HIDDEN, generator=gen)
    logits = torch.randn(rows, VOCAB, generator=gen)
    before = logits.clone()
    STASH.put(hidden)
    after = proc.apply(logits)
    return before, after, hidden


def test_step_rules_first_step_newlines_budget_floor_and_think_end() -> None:
    predictor = tiny_predictor()
    with installed(predictor):
        proc = _processor()
        out_guided: list[int] = []
        out_plain: list[int] = []
        out_zero: list[int] = []
        added = [
            (0, _params(5), None, out_guided),
            (1, _params(None), None, out_plain),
            (2, _params(0), None, out_zero),  # B <= 0: no guidance (spec)
        ]
        # Step 1: the first step is a boundary; b = B = 5.
        before, after, h = _step(proc, 3, BatchUpdate(3, [], added, []))
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 5))
        assert not torch.equal(after[0], before[0])
        assert torch.equal(after[1], before[1]) and torch.equal(after[2], before[2])
        # A non-newline token: not a boundary, nothing changes.
        out_guided.append(OTHER)
        before, after, h = _step(proc, 3, seed=1)
        assert torch.equal(after, before)
        # A newline after 2 thinking tokens: guided with b = 5 - 2 = 3.
        out_guided.append(NEWLINE)
        before, after, h = _step(proc, 3, seed=2)
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 3))
        assert torch.equal(after[1:], before[1:])
        # Past the budget: b is floored at 1, never 0 or negative.
        out_guided.extend([OTHER] * 9 + [NEWLINE])
        before, after, h = _step(proc, 3, seed=3)
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 1))
        assert int(proc._budget[0]) == 1
        # </think> closes thinking: no guidance afterwards, not even after a newline.
        out_guided.append(THINK_END)
        before, after, _ = _step(proc, 3, seed=4)
        assert torch.equal(after, before)
        out_guided.append(NEWLINE)
        before, after, _ = _step(proc, 3, seed=5)
        assert torch.equal(after, before)


def test_rows_follow_moves_and_swaps_and_slot_reuse() -> None:
    predictor = tiny_predictor(1)
    with installed(predictor):
        proc = _processor()
        a: list[int] = []
        b: list[int] = [OTHER]  # not at a boundary
        _step(proc, 2, BatchUpdate(2, [], [(0, _params(9), None, a), (1, _params(9), None, b)], []))
        a.append(OTHER)  # row 0 leaves the boundary
        b.append(NEWLINE)  # row 1 reaches one
        swap = BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)])
        before, after, h = _step(proc, 2, swap, seed=7)
        # b's request now sits in row 0 with 2 thinking tokens: b = 9 - 2.
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 7))
        assert torch.equal(after[1], before[1])
        # Row 0 removed and its slot reused by an unguided request in the same step.
        reuse = BatchUpdate(2, [0], [(0, _params(None), None, [])], [])
        before, after, _ = _step(proc, 2, reuse, seed=8)
        assert torch.equal(after, before)
        # A one-way move of the remaining guided row (row 1, 1 token, not at a boundary).
        a.append(NEWLINE)
        move = BatchUpdate(1, [0], [], [(1, 0, MoveDirectionality.UNIDIRECTIONAL)])
        before, after, h = _step(proc, 1, move, seed=9)
        torch.testing.assert_close(after[0], expected_row(predictor, before[0], h[0], 7))


def test_prompt_without_open_thinking_is_never_guided() -> None:
    with installed(tiny_predictor()):
        proc = _processor()
        params = _params(5, **{guidance_args.THINKING_OPEN: 0})
        before, after, _ = _step(proc, 1, BatchUpdate(1, [], [(0, params, None, [])], []))
        assert torch.equal(after, before)


def test_without_the_wrapper_model_guided_rows_pass_through() -> None:
    with installed(None):
        proc = _processor()
        before, after, _ = _step(proc, 1, BatchUpdate(1, [], [(0, _params(5), None, [])], []))
        assert torch.equal(after, before)


def test_apply_never_raises_and_a_stale_or_misshaped_stash_is_not_used() -> None:
    predictor = tiny_predictor()
    with installed(predictor):
        proc = _processor()
        proc.update_state(BatchUpdate(2, [], [(0, _params(5), None, [])], []))
        logits = torch.randn(2, VOCAB)
        before = logits.clone()
        STASH.put(torch.randn(3, HIDDEN))  # wrong row count: not this step's rows
        assert torch.equal(proc.apply(logits), before)
        # Nothing stashed at all (the stash is consumed by every apply).
        assert torch.equal(proc.apply(logits), before)

        def broken(h: torch.Tensor) -> Any:
            raise RuntimeError("predictor exploded")

        predictor.raw = broken  # type: ignore[method-assign]
        STASH.put(torch.randn(2, HIDDEN))
        assert torch.equal(proc.apply(logits), before)


def test_validate_params_refuses_bad_types() -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        BudgetGuidanceLogitsProcessor.validate_params(
            SamplingParams(extra_args={guidance_args.BUDGET: "5"})
        )
    with pytest.raises(ValueError, match="without"):
        BudgetGuidanceLogitsProcessor.validate_params(
            SamplingParams(extra_args={guidance_args.MASK: 0})
        )
    BudgetGuidanceLogitsProcessor.validate_params(SamplingParams(extra_args={"other": 1}))
