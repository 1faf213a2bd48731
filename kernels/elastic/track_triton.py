"""Triton version of :func:`kernels.elastic.track.elastic_track_ref`.

Grid: one program per scheduled request. An inactive row returns after one load; an
active row scans only the committed tokens it has not seen (one per decode step).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.elastic.state import ElasticCol

_BLOCK = 128


@triton.jit  # type: ignore[untyped-decorator]
def _elastic_track_kernel(  # type: ignore[no-untyped-def]
    table_ptr,
    table_stride,
    idx_mapping_ptr,
    all_token_ids_ptr,
    all_token_ids_stride,
    prompt_len_ptr,
    total_len_ptr,
    COL_ACTIVE: tl.constexpr,
    COL_PHASE: tl.constexpr,
    COL_USED: tl.constexpr,
    COL_END_ID: tl.constexpr,
    COL_OPEN: tl.constexpr,
    COL_END_POS: tl.constexpr,
    COL_SCAN_POS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    slot = tl.load(idx_mapping_ptr + tl.program_id(0)).to(tl.int64)
    active = tl.load(table_ptr + COL_ACTIVE * table_stride + slot)
    if active == 0:
        return
    is_open = tl.load(table_ptr + COL_OPEN * table_stride + slot)
    end_pos = tl.load(table_ptr + COL_END_POS * table_stride + slot)
    scan_pos = tl.load(table_ptr + COL_SCAN_POS * table_stride + slot)
    plen = tl.load(prompt_len_ptr + slot).to(tl.int32)
    total = tl.load(total_len_ptr + slot).to(tl.int32)
    if (is_open != 0) & (end_pos < 0):
        end_id = tl.load(table_ptr + COL_END_ID * table_stride + slot)
        lo = tl.maximum(scan_pos, plen)
        tokens_ptr = all_token_ids_ptr + slot * all_token_ids_stride
        for start in range(lo, total, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            toks = tl.load(tokens_ptr + offs, mask=offs < total, other=-1)
            first = tl.min(tl.where(toks == end_id, offs, 2147483647), axis=0)
            if (end_pos < 0) & (first < 2147483647):
                end_pos = first
        scan_pos = total
    found = end_pos >= 0
    # Phases: 0 = THINKING, 1 = ANSWER (kernels.elastic.state).
    phase = tl.where((is_open != 0) & (end_pos < 0), 0, 1)
    used = tl.where(found, total - end_pos - 1, total - plen)
    tl.store(table_ptr + COL_PHASE * table_stride + slot, phase)
    tl.store(table_ptr + COL_USED * table_stride + slot, used)
    tl.store(table_ptr + COL_END_POS * table_stride + slot, end_pos)
    tl.store(table_ptr + COL_SCAN_POS * table_stride + slot, scan_pos)


def apply_elastic_track_triton(
    table: torch.Tensor,
    idx_mapping: torch.Tensor,
    all_token_ids: torch.Tensor,
    prompt_len: torch.Tensor,
    total_len: torch.Tensor,
) -> None:
    """Launch :func:`_elastic_track_kernel`; same contract as the torch op."""
    num_reqs = idx_mapping.shape[0]
    if num_reqs == 0:
        return
    assert table.dtype == torch.int32 and table.stride(1) == 1 and all_token_ids.stride(1) == 1
    _elastic_track_kernel[(num_reqs,)](
        table,
        table.stride(0),
        idx_mapping,
        all_token_ids,
        all_token_ids.stride(0),
        prompt_len,
        total_len,
        COL_ACTIVE=int(ElasticCol.ACTIVE),
        COL_PHASE=int(ElasticCol.PHASE),
        COL_USED=int(ElasticCol.USED),
        COL_END_ID=int(ElasticCol.THINK_END_ID),
        COL_OPEN=int(ElasticCol.THINKING_OPEN),
        COL_END_POS=int(ElasticCol.THINK_END_POS),
        COL_SCAN_POS=int(ElasticCol.SCAN_POS),
        BLOCK=_BLOCK,
    )
