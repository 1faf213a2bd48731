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

A closing sequence of ``END_LEN > 1`` tokens is found complete (THINK_END_POS is the
position of its *last* token, so USED is unchanged) and never across the prompt's
end; while thinking, MATCHED is how many of its first tokens the output ends with,
so the mask forces the rest. ``max_end_len`` (the host knows it) bounds the loops
over sequence positions: 1 for one-token batches, which then cost what they did.

Only committed tokens count: with speculative decoding the draft rows of one request
would share one state (unsupported, as for every custom processor).
"""

from __future__ import annotations

import torch

from kernels.elastic.state import ANSWER, THINKING, ElasticCol, end_token_col

_TRACKED = (
    ElasticCol.PHASE,
    ElasticCol.USED,
    ElasticCol.THINK_END_POS,
    ElasticCol.SCAN_POS,
    ElasticCol.MATCHED,
)


def elastic_track_ref(
    table: torch.Tensor,
    idx_mapping: torch.Tensor,
    all_token_ids: torch.Tensor,
    prompt_len: torch.Tensor,
    total_len: torch.Tensor,
    max_end_len: int = 1,
) -> None:
    """Update the tracked columns in place with torch ops (no host sync).

    Reads the whole ``[num_reqs, max_model_len]`` token window: a reference and the
    CPU fallback, and the GPU path for batches with multi-token closings (the Triton
    kernel knows one-token closings only).
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
    end_len = cols[ElasticCol.END_LEN].clamp(min=1)
    hit = (pos >= lo.unsqueeze(1)) & (pos < total.unsqueeze(1))
    if max_end_len <= 1:
        hit &= tokens == cols[ElasticCol.THINK_END_ID].unsqueeze(1)
    else:
        # Position p ends the sequence when tokens[p - len + 1 + j] == seq[j] for all j.
        hit &= pos >= (plen + end_len - 1).unsqueeze(1)
        width = tokens.shape[1]
        for j in range(max_end_len):
            back = (end_len - 1 - j).unsqueeze(1)
            at = (pos.unsqueeze(0) - back).clamp(0, width - 1).to(torch.int64)
            same = tokens.gather(1, at) == cols[end_token_col(j)].unsqueeze(1)
            hit &= same | (j >= end_len).unsqueeze(1)
    none = torch.iinfo(torch.int32).max
    first = torch.where(hit, pos, none).amin(dim=1)
    scanning = active & open_ & (end_pos < 0)
    end_pos = torch.where(scanning & (first != none), first, end_pos)
    scan_pos = torch.where(scanning, total, cols[ElasticCol.SCAN_POS])
    found = end_pos >= 0
    thinking = open_ & ~found
    phase = torch.where(thinking, THINKING, ANSWER).to(torch.int32)
    used = torch.where(found, total - end_pos - 1, total - plen)
    matched = torch.where(
        thinking, _partial_match(tokens, cols, plen, total, end_len, max_end_len), 0
    ).to(torch.int32)

    # Inactive rows keep their values; the slots are distinct, so index_copy_ is exact.
    values = (phase, used, end_pos, scan_pos, matched)
    for col, value in zip(_TRACKED, values, strict=True):
        table[col].index_copy_(0, slots, torch.where(active, value, cols[col]))


def _partial_match(
    tokens: torch.Tensor,
    cols: torch.Tensor,
    plen: torch.Tensor,
    total: torch.Tensor,
    end_len: torch.Tensor,
    max_end_len: int,
) -> torch.Tensor:
    """Per row: the largest ``k < END_LEN`` such that the generated tokens end with the
    sequence's first ``k`` tokens (0 if none)."""
    best = torch.zeros_like(total)
    width = tokens.shape[1]
    for k in range(1, max_end_len):
        ok = (k < end_len) & (total - k >= plen)
        for j in range(k):
            at = (total - k + j).clamp(0, width - 1).to(torch.int64).unsqueeze(1)
            ok &= tokens.gather(1, at).squeeze(1) == cols[end_token_col(j)]
        best = torch.where(ok, k, best)
    return best


def apply_elastic_track(
    table: torch.Tensor,
    idx_mapping: torch.Tensor,
    all_token_ids: torch.Tensor,
    prompt_len: torch.Tensor,
    total_len: torch.Tensor,
    max_end_len: int = 1,
) -> None:
    """In place: the Triton kernel for CUDA tensors, :func:`elastic_track_ref` otherwise.

    ``max_end_len > 1`` (a scheduled row closes with a token sequence) takes the torch
    op on CUDA too: the Triton kernel matches one token only, and a GPU to test a
    sequence version on is not part of this project's CI.
    """
    if table.is_cuda and max_end_len <= 1:
        from kernels.elastic.track_triton import apply_elastic_track_triton

        apply_elastic_track_triton(table, idx_mapping, all_token_ids, prompt_len, total_len)
        return
    elastic_track_ref(table, idx_mapping, all_token_ids, prompt_len, total_len, max_end_len)
