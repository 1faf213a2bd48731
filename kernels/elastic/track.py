"""Device-side phase tracking for Model Runner V2: PHASE and USED from the token history.

Model Runner V2 keeps every request's committed tokens on the device
(``all_token_ids[slot, :total_len]``, the prompt first), so the phase can be derived
there without a host round trip. Per scheduled request (``idx_mapping``) of an
active row:

* while ``THINKING_OPEN`` and no ``</think>`` found yet, scan the committed tokens
  from ``max(SCAN_POS, prompt_len)`` to ``total_len`` for the first ``</think>``
  (usually one new token per step; a whole resumed output once after preemption)
  and store its position in THINK_END_POS, then ``SCAN_POS = total_len``;
* PHASE = THINKING while open with no ``</think>``, else ANSWER;
* USED = ``total_len - prompt_len`` while thinking (or when the prompt had no open
  thinking), else ``total_len - THINK_END_POS - 1``.

Only committed tokens count: with speculative decoding the draft rows of one request
would share one state (unsupported, as for every custom processor).
"""

from __future__ import annotations

import torch

from kernels.elastic.state import ANSWER, THINKING, ElasticCol

_TRACKED = (ElasticCol.PHASE, ElasticCol.USED, ElasticCol.THINK_END_POS, ElasticCol.SCAN_POS)


def elastic_track_ref(
    table: torch.Tensor,
    idx_mapping: torch.Tensor,
    all_token_ids: torch.Tensor,
    prompt_len: torch.Tensor,
    total_len: torch.Tensor,
) -> None:
    """Update the tracked columns in place with torch ops (no host sync).

    Reads the whole ``[num_reqs, max_model_len]`` token window: a reference and the
    CPU fallback, not the GPU path (that is the Triton kernel).
    """
    if idx_mapping.numel() == 0:
        return
    slots = idx_mapping.to(torch.int64)
    cols = table.index_select(1, slots)
    active = cols[ElasticCol.ACTIVE] != 0
    open_ = cols[ElasticCol.THINKING_OPEN] != 0
    end_pos = cols[ElasticCol.THINK_END_POS]
    plen = prompt_len.index_select(0, slots).to(torch.int32)
    total = total_len.index_select(0, slots).to(torch.int32)

    tokens = all_token_ids.index_select(0, slots)
    pos = torch.arange(tokens.shape[1], device=tokens.device, dtype=torch.int32)
    lo = torch.maximum(cols[ElasticCol.SCAN_POS], plen)
    hit = (
        (pos >= lo.unsqueeze(1))
        & (pos < total.unsqueeze(1))
        & (tokens == cols[ElasticCol.THINK_END_ID].unsqueeze(1))
    )
    none = torch.iinfo(torch.int32).max
    first = torch.where(hit, pos, none).amin(dim=1)
    scanning = active & open_ & (end_pos < 0)
    end_pos = torch.where(scanning & (first != none), first, end_pos)
    scan_pos = torch.where(scanning, total, cols[ElasticCol.SCAN_POS])
    found = end_pos >= 0
    phase = torch.where(open_ & ~found, THINKING, ANSWER).to(torch.int32)
    used = torch.where(found, total - end_pos - 1, total - plen)

    # Inactive rows keep their values; the slots are distinct, so index_copy_ is exact.
    for col, value in zip(_TRACKED, (phase, used, end_pos, scan_pos), strict=True):
        table[col].index_copy_(0, slots, torch.where(active, value, cols[col]))


def apply_elastic_track(
    table: torch.Tensor,
    idx_mapping: torch.Tensor,
    all_token_ids: torch.Tensor,
    prompt_len: torch.Tensor,
    total_len: torch.Tensor,
) -> None:
    """In place: the Triton kernel for CUDA tensors, :func:`elastic_track_ref` otherwise."""
    if table.is_cuda:
        from kernels.elastic.track_triton import apply_elastic_track_triton

        apply_elastic_track_triton(table, idx_mapping, all_token_ids, prompt_len, total_len)
        return
    elastic_track_ref(table, idx_mapping, all_token_ids, prompt_len, total_len)
