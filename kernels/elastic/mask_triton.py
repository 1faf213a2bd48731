"""Triton version of :func:`kernels.elastic.mask.elastic_mask_ref`.

Grid: one program per (row, vocab block). A program whose row is free returns after
reading seven int32 state values, so a step where nothing is forced costs no logits
traffic; a forced row is written once (no read). On CPU the kernel runs only under
``TRITON_INTERPRET=1`` (the tests do that); vLLM's CPU build has no Triton backend.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.elastic.state import ElasticCol

_BLOCK = 2048


@triton.jit  # type: ignore[untyped-decorator]
def _elastic_mask_kernel(  # type: ignore[no-untyped-def]
    logits_ptr,
    logits_stride,
    idx_mapping_ptr,
    table_ptr,
    table_stride,
    vocab_size,
    HAS_MAPPING: tl.constexpr,
    COL_ACTIVE: tl.constexpr,
    COL_PHASE: tl.constexpr,
    COL_USED: tl.constexpr,
    COL_T: tl.constexpr,
    COL_S: tl.constexpr,
    COL_END: tl.constexpr,
    COL_EOS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    if HAS_MAPPING:  # noqa: SIM108  (a constexpr branch, compiled out)
        slot = tl.load(idx_mapping_ptr + row).to(tl.int64)
    else:
        slot = row
    active = tl.load(table_ptr + COL_ACTIVE * table_stride + slot)
    phase = tl.load(table_ptr + COL_PHASE * table_stride + slot)
    used = tl.load(table_ptr + COL_USED * table_stride + slot)
    t = tl.load(table_ptr + COL_T * table_stride + slot)
    s = tl.load(table_ptr + COL_S * table_stride + slot)
    end_id = tl.load(table_ptr + COL_END * table_stride + slot)
    eos_id = tl.load(table_ptr + COL_EOS * table_stride + slot)
    # Phases: 0 = THINKING, 1 = ANSWER (kernels.elastic.state).
    force_end = (active != 0) & (phase == 0) & (used >= t)
    force_eos = (active != 0) & (phase == 1) & (s >= 0) & (used >= s)
    forced = tl.where(force_end, end_id, tl.where(force_eos, eos_id, -1))
    if (forced < 0) | (forced >= vocab_size):
        return
    offs = block * BLOCK + tl.arange(0, BLOCK)
    vals = tl.where(offs == forced, 0.0, float("-inf"))
    tl.store(logits_ptr + row * logits_stride + offs, vals, mask=offs < vocab_size)


def apply_elastic_mask_triton(
    logits: torch.Tensor, table: torch.Tensor, idx_mapping: torch.Tensor | None = None
) -> torch.Tensor:
    """Launch :func:`_elastic_mask_kernel` in place; same contract as the torch op.

    ``logits`` must be fp32 with unit stride along the vocab; ``table`` int32 with
    contiguous columns.
    """
    num_rows, vocab = logits.shape
    if num_rows == 0:
        return logits
    assert logits.stride(1) == 1 and table.stride(1) == 1 and table.dtype == torch.int32
    grid = (num_rows, triton.cdiv(vocab, _BLOCK))
    _elastic_mask_kernel[grid](
        logits,
        logits.stride(0),
        idx_mapping if idx_mapping is not None else table,  # unused without a mapping
        table,
        table.stride(0),
        vocab,
        HAS_MAPPING=idx_mapping is not None,
        COL_ACTIVE=int(ElasticCol.ACTIVE),
        COL_PHASE=int(ElasticCol.PHASE),
        COL_USED=int(ElasticCol.USED),
        COL_T=int(ElasticCol.THINK_BUDGET),
        COL_S=int(ElasticCol.SOLUTION_BUDGET),
        COL_END=int(ElasticCol.THINK_END_ID),
        COL_EOS=int(ElasticCol.EOS_ID),
        BLOCK=_BLOCK,
    )
    return logits
