"""The confidence early-stop op: one batched step over the logits rows (torch only).

Per row ``r`` (slot ``slots[r]``, ``gen[r]`` tokens generated before this step):

1. token confidence ``c = -mean(top-k log_softmax(logits[r]))`` (the row's own k);
2. ``c`` goes into the slot's ring at ``gen % window`` (the value it replaces leaves
   the running sum): a step whose token vLLM discards (a partial prefill) is simply
   overwritten at the same position next step;
3. group confidence = sum / min(tokens seen, window); once a full window has been seen
   and it is below the threshold, every logit but EOS's is set to -inf.

No host sync and no per-row Python: ``max_k`` (the largest k of the batch) comes from
the host copy of the arguments. Rows whose slot is inactive are left untouched, and a
row that is not stopped keeps its logits bit for bit.
"""

from __future__ import annotations

import torch

from kernels.confidence.state import ConfCol, ConfidenceState

MIN_LOGPROB = -100.0  # core.token_confidence clamps the same way


def token_confidence(logits: torch.Tensor, top_k: torch.Tensor, max_k: int) -> torch.Tensor:
    """``[R]`` confidences of ``[R, V]`` logits, each row over its own ``top_k`` (<= max_k)."""
    lp = torch.log_softmax(logits.float(), dim=-1).clamp_min(MIN_LOGPROB)
    top = lp.topk(max_k, dim=-1).values  # sorted, largest first
    k = top_k.to(torch.int64).clamp(1, max_k)
    means = top.cumsum(-1).gather(1, (k - 1).unsqueeze(1)).squeeze(1) / k
    return -means


def confidence_step(
    logits: torch.Tensor,
    state: ConfidenceState,
    slots: torch.Tensor,
    gen: torch.Tensor,
    max_k: int,
) -> torch.Tensor:
    """Update the windows of ``slots`` and force EOS on rows below their threshold.

    ``logits`` is modified in place and returned; returns also the ``[R]`` bool of the
    rows stopped this step (tests read it; the adapters ignore it).
    """
    rows = logits.shape[0]
    if rows == 0:
        return torch.zeros(0, dtype=torch.bool, device=logits.device)
    table = state.table.device
    slots = slots.to(torch.int64)
    gen = gen.to(torch.int64)
    cols = table.index_select(1, slots)
    active = cols[ConfCol.ACTIVE] != 0
    conf = token_confidence(logits, cols[ConfCol.TOP_K], max_k)

    start = cols[ConfCol.START].to(torch.int64)
    start = torch.where(start < 0, gen, start)
    table[ConfCol.START].index_put_(
        (slots,), torch.where(active, start, cols[ConfCol.START].long()).to(table.dtype)
    )

    window = cols[ConfCol.WINDOW].to(torch.int64).clamp_min(1)
    pos = torch.remainder(gen, window)
    old = state.ring[slots, pos]
    new = torch.where(active, conf, old)
    state.ring.index_put_((slots, pos), new)
    sums = state.sums[slots] + (new - old).to(torch.float64)
    state.sums.index_put_((slots,), sums)

    seen = gen - start + 1
    full = seen >= window
    group = sums / seen.clamp(min=1).minimum(window).to(torch.float64)
    threshold = cols[ConfCol.THRESHOLD].contiguous().view(torch.float32).to(torch.float64)
    stop = active & full & (group < threshold)

    eos = cols[ConfCol.EOS_ID].to(torch.int64).unsqueeze(1)
    kept = logits.gather(1, eos).squeeze(1)
    logits.masked_fill_(stop.unsqueeze(1), float("-inf"))
    logits.scatter_(1, eos, torch.where(stop, torch.zeros_like(kept), kept).unsqueeze(1))
    return stop
