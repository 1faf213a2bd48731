"""The Elastic Reasoning mask: force ``</think>`` or EOS on rows whose budget ran out.

Per row (slot = ``idx_mapping[row]``, or ``row`` without a mapping), with the columns
of :class:`~kernels.elastic.state.ElasticCol`:

* active, THINKING and ``used >= t``: only the next token of the closing sequence is
  allowed, token ``MATCHED`` (``THINK_END_ID`` for a one-token ``</think>``): the whole
  sequence is forced one token per step, continuing a prefix the model began itself;
* active, ANSWER, ``s >= 0`` and ``used >= s``: only ``EOS_ID`` is allowed;
* active, THINKING and ``used < THINK_MIN`` (a thinking minimum not yet spent): the
  next token of the closing sequence and ``EOS_ID`` are set to ``-inf``, so thinking
  goes on (:func:`apply_elastic_mask` with ``minimum=True``; other steps skip it);
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


def _columns(table: torch.Tensor, idx_mapping: torch.Tensor | None, num_rows: int) -> torch.Tensor:
    if idx_mapping is None:
        return table[:, :num_rows]
    return table.index_select(1, idx_mapping.to(torch.int64))


def _next_end_token(cols: torch.Tensor) -> torch.Tensor:
    """Per row, the next token of the closing sequence: column THINK_END_ID for token 0,
    else END_TAIL + k - 1 (a one-token row has MATCHED = 0, so this is THINK_END_ID)."""
    k = cols[ElasticCol.MATCHED].clamp(min=0)
    k = torch.minimum(k, (cols[ElasticCol.END_LEN] - 1).clamp(min=0))
    col = torch.where(k == 0, int(ElasticCol.THINK_END_ID), int(ElasticCol.END_TAIL) - 1 + k)
    return cols.gather(0, col.to(torch.int64).unsqueeze(0)).squeeze(0)


def elastic_held_tokens(
    table: torch.Tensor, idx_mapping: torch.Tensor | None, num_rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([num_rows], [num_rows])`` int32: per row the closing token and the EOS id held
    back while its thinking minimum is not spent, or -1 for a row that holds nothing."""
    cols = _columns(table, idx_mapping, num_rows)
    active = cols[ElasticCol.ACTIVE] != 0
    thinking = active & (cols[ElasticCol.PHASE] == THINKING)
    used = cols[ElasticCol.USED]
    hold = thinking & (used < cols[ElasticCol.THINK_MIN]) & (used < cols[ElasticCol.THINK_BUDGET])
    none = torch.full_like(used, -1)
    return (
        torch.where(hold, _next_end_token(cols), none),
        torch.where(hold, cols[ElasticCol.EOS_ID], none),
    )


def elastic_forced_tokens(
    table: torch.Tensor, idx_mapping: torch.Tensor | None, num_rows: int
) -> torch.Tensor:
    """``[num_rows]`` int32: the token each row is forced to, or -1 for a free row."""
    cols = _columns(table, idx_mapping, num_rows)
    active = cols[ElasticCol.ACTIVE] != 0
    phase = cols[ElasticCol.PHASE]
    used = cols[ElasticCol.USED]
    solution = cols[ElasticCol.SOLUTION_BUDGET]
    force_end = active & (phase == THINKING) & (used >= cols[ElasticCol.THINK_BUDGET])
    force_eos = active & (phase == ANSWER) & (solution >= 0) & (used >= solution)
    end_token = _next_end_token(cols)
    none = torch.full_like(used, -1)
    return torch.where(
        force_end,
        end_token,
        torch.where(force_eos, cols[ElasticCol.EOS_ID], none),
    )


def elastic_mask_ref(
    logits: torch.Tensor,
    table: torch.Tensor,
    idx_mapping: torch.Tensor | None = None,
    *,
    minimum: bool = False,
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
    if minimum:  # before forcing: a forced row holds nothing back (used >= t)
        for held in elastic_held_tokens(table, idx_mapping, num_rows):
            _hold_back(logits, held, (held >= 0) & (held < vocab))
    forced = elastic_forced_tokens(table, idx_mapping, num_rows)
    hit = (forced >= 0) & (forced < vocab)
    if logits.device.type == "cpu":
        _force_rows_indexed(logits, forced, hit)
    else:
        _force_rows_branch_free(logits, forced, hit)
    return logits


def _hold_back(logits: torch.Tensor, held: torch.Tensor, hit: torch.Tensor) -> None:
    """``-inf`` at ``(row, held[row])`` for the rows of ``hit``; the rest untouched."""
    if logits.device.type == "cpu":
        rows = hit.nonzero().squeeze(1)
        if rows.numel():
            logits[rows, held[rows].to(torch.int64)] = float("-inf")
        return
    col = torch.where(hit, held, torch.zeros_like(held)).to(torch.int64).unsqueeze(1)
    kept = logits.gather(1, col)
    logits.scatter_(1, col, torch.where(hit.unsqueeze(1), float("-inf"), kept))


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
    minimum: bool = False,
) -> torch.Tensor:
    """In place: the Triton kernel for CUDA tensors, :func:`elastic_mask_ref` otherwise.

    ``minimum``: some row holds a thinking minimum back; such batches take the torch op
    as well (the Triton kernel forces only; a GPU to test a hold-back kernel on is not
    part of this project's CI).

    ``sequences``: some row closes thinking with several tokens. The Triton kernel
    forces ``THINK_END_ID`` only, so such batches take the torch op (also on CUDA:
    correct, and no host sync, at the cost of a pass over the logits; extending the
    kernel needs a GPU to test, which the CPU project does not have).
    """
    if logits.is_cuda and not sequences and not minimum:
        from kernels.elastic.mask_triton import apply_elastic_mask_triton

        return apply_elastic_mask_triton(logits, table, idx_mapping)
    return elastic_mask_ref(logits, table, idx_mapping, minimum=minimum)
