"""The Elastic Reasoning mask: force ``</think>`` or EOS on rows whose budget ran out.

Per row (slot = ``idx_mapping[row]``, or ``row`` without a mapping), with the columns
of :class:`~kernels.elastic.state.ElasticCol`:

* active, THINKING and ``used >= t``: only the next token of the closing sequence is
  allowed, token ``MATCHED`` (``THINK_END_ID`` for a one-token ``</think>``): the whole
  sequence is forced one token per step, continuing a prefix the model began itself;
* active, ANSWER, ``s >= 0`` and ``used >= s``: only ``EOS_ID`` is allowed;
* otherwise the row is untouched, bit for bit.

A forced row becomes ``-inf`` everywhere except the forced token, whose logit is set
to 0.0: finite even when an earlier stage had masked it, so the row never turns into
all ``-inf`` (NaN after softmax). A forced id outside ``[0, vocab)`` leaves the row
untouched instead of indexing out of bounds (the adapters refuse such ids first).

:func:`apply_elastic_mask` is the entry point: the Triton kernel on CUDA tensors, the
batched torch op :func:`elastic_mask_ref` otherwise. Both run in place, without a host
sync and without a per-row Python loop. The Triton kernel knows one-token closings
only; callers pass ``sequences=True`` when a row of the batch has a longer one, and get
the torch op (see :func:`apply_elastic_mask`).
"""

from __future__ import annotations

import torch

from kernels.elastic.state import ANSWER, THINKING, ElasticCol


def elastic_forced_tokens(
    table: torch.Tensor, idx_mapping: torch.Tensor | None, num_rows: int
) -> torch.Tensor:
    """``[num_rows]`` int32: the token each row is forced to, or -1 for a free row."""
    if idx_mapping is None:
        cols = table[:, :num_rows]
    else:
        cols = table.index_select(1, idx_mapping.to(torch.int64))
    active = cols[ElasticCol.ACTIVE] != 0
    phase = cols[ElasticCol.PHASE]
    used = cols[ElasticCol.USED]
    solution = cols[ElasticCol.SOLUTION_BUDGET]
    force_end = active & (phase == THINKING) & (used >= cols[ElasticCol.THINK_BUDGET])
    force_eos = active & (phase == ANSWER) & (solution >= 0) & (used >= solution)
    # The next token of the closing sequence: column THINK_END_ID for token 0, else
    # END_TAIL + k - 1 (a one-token row has MATCHED = 0, so this is THINK_END_ID).
    k = cols[ElasticCol.MATCHED].clamp(min=0)
    k = torch.minimum(k, (cols[ElasticCol.END_LEN] - 1).clamp(min=0))
    col = torch.where(k == 0, int(ElasticCol.THINK_END_ID), int(ElasticCol.END_TAIL) - 1 + k)
    end_token = cols.gather(0, col.to(torch.int64).unsqueeze(0)).squeeze(0)
    none = torch.full_like(used, -1)
    return torch.where(
        force_end,
        end_token,
        torch.where(force_eos, cols[ElasticCol.EOS_ID], none),
    )


def elastic_mask_ref(
    logits: torch.Tensor, table: torch.Tensor, idx_mapping: torch.Tensor | None = None
) -> torch.Tensor:
    """Apply the mask in place with torch ops; returns ``logits``.

    ``logits`` is ``[rows, vocab]``; ``table`` is a :class:`RowState` device table on
    the same device; ``idx_mapping`` (``[rows]`` int) maps rows to slots. On CPU it
    writes the forced rows only; on another device it is branch-free (no host sync)
    and passes over the whole tensor, leaving free rows bit-identical.
    """
    num_rows, vocab = logits.shape
    if num_rows == 0:
        return logits
    forced = elastic_forced_tokens(table, idx_mapping, num_rows)
    hit = (forced >= 0) & (forced < vocab)
    if logits.device.type == "cpu":
        _force_rows_indexed(logits, forced, hit)
    else:
        _force_rows_branch_free(logits, forced, hit)
    return logits


def _force_rows_indexed(logits: torch.Tensor, forced: torch.Tensor, hit: torch.Tensor) -> None:
    """CPU: there is no device to sync with, so find the forced rows and write only
    those; a step with nothing forced costs O(rows), not a pass over rows x vocab."""
    rows = hit.nonzero().squeeze(1)
    if rows.numel():
        logits.index_fill_(0, rows, float("-inf"))
        logits[rows, forced[rows].to(torch.int64)] = 0.0


def _force_rows_branch_free(logits: torch.Tensor, forced: torch.Tensor, hit: torch.Tensor) -> None:
    """Any device, no host sync: one masked pass over the whole tensor."""
    col = torch.where(hit, forced, torch.zeros_like(forced)).to(torch.int64).unsqueeze(1)
    # Free rows get their own value at column 0 written back: a bit-exact no-op that
    # keeps this branch-free (no nonzero(), so no host sync).
    kept = torch.where(hit.unsqueeze(1), 0.0, logits.gather(1, col))
    logits.masked_fill_(hit.unsqueeze(1), float("-inf"))
    logits.scatter_(1, col, kept)


def apply_elastic_mask(
    logits: torch.Tensor,
    table: torch.Tensor,
    idx_mapping: torch.Tensor | None = None,
    *,
    sequences: bool = False,
) -> torch.Tensor:
    """In place: the Triton kernel for CUDA tensors, :func:`elastic_mask_ref` otherwise.

    ``sequences``: some row closes thinking with several tokens. The Triton kernel
    forces ``THINK_END_ID`` only, so such batches take the torch op (also on CUDA:
    correct, and no host sync, at the cost of a pass over the logits; extending the
    kernel needs a GPU to test, which the CPU project does not have).
    """
    if logits.is_cuda and not sequences:
        from kernels.elastic.mask_triton import apply_elastic_mask_triton

        return apply_elastic_mask_triton(logits, table, idx_mapping)
    return elastic_mask_ref(logits, table, idx_mapping)
