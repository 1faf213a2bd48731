"""Persistent-batch fuzz of both adapters against the per-request spec model.

Like vLLM's tests/v1/logits_processors/test_correctness.py: many steps of random
arrivals, finishes, aborts, condensing moves and swaps (V1), or slot recycling,
partial scheduling, row shuffles and preemption with resumption (V2). Every step,
every row of the processed logits is checked against ``expected_forced``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from elastic_spec import check_row, expected_forced
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from kernels.elastic import args as keys
from kernels.elastic.args import ElasticArgs, parse
from kernels.elastic.vllm_v1 import ElasticLogitsProcessor

VOCAB = 11
END, EOS, OTHER = 4, 2, 7
# A multi-token closing that overlaps itself (4 5 4 | 6): a diverging partial match
# must fall back to "4" still matching, not to nothing.
END_SEQ = (END, 5, END, 6)


@dataclass
class Req:
    params: SamplingParams
    args: ElasticArgs | None
    prompt: list[int]
    out: list[int] = field(default_factory=list)


def random_request(rng: random.Random) -> Req:
    extra: dict[str, Any] = {}
    if rng.random() < 0.8:
        extra = {keys.THINKING_BUDGET: rng.randint(0, 6), keys.THINK_END_ID: END, keys.EOS_ID: EOS}
        if rng.random() < 0.4:
            del extra[keys.THINK_END_ID]
            extra[keys.THINK_END_IDS] = ",".join(map(str, END_SEQ))
        if rng.random() < 0.7:
            extra[keys.SOLUTION_BUDGET] = rng.randint(0, 4)
        if rng.random() < 0.2:
            extra[keys.THINKING_OPEN] = 0
    elif rng.random() < 0.5:
        extra = {"some_other_processor": 1}
    params = SamplingParams(extra_args=extra or None)
    prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 5))]
    return Req(params, parse(params.extra_args), prompt)


def next_token(rng: random.Random, row: torch.Tensor) -> int:
    """Sample from the processed row; the raw logits favour END/EOS now and then."""
    finite = torch.isfinite(row).nonzero().flatten().tolist()
    return int(rng.choice(finite))


def raw_logits(rng: random.Random, rows: int) -> torch.Tensor:
    logits = torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(rng.randrange(2**31)))
    # Occasional -inf from "earlier processors", and NaN-free otherwise.
    logits[
        torch.rand(rows, VOCAB, generator=torch.Generator().manual_seed(rng.randrange(99))) < 0.05
    ] = float("-inf")
    logits[:, 0] = 0.0  # every row keeps one finite token, as a real row would
    return logits


def finished(req: Req) -> bool:
    # EOS ends a request (as vLLM does without ignore_eos); so does a length cap.
    return (bool(req.out) and req.out[-1] == EOS) or len(req.out) >= 20


@pytest.mark.parametrize("seed", range(6))
def test_v1_adapter_persistent_batch(seed: int) -> None:
    rng = random.Random(seed)
    capacity = 8
    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=capacity),
        model_config=SimpleNamespace(get_vocab_size=lambda: VOCAB),
    )
    proc = ElasticLogitsProcessor(config, torch.device("cpu"), False)  # type: ignore[arg-type]
    batch: list[Req | None] = []
    forced_seen = tail_seen = 0
    for _step in range(300):
        removed: list[int] = []
        added: list[tuple[int, SamplingParams, list[int], list[int]]] = []
        moved: list[tuple[int, int, MoveDirectionality]] = []
        for i, req in enumerate(batch):
            if req is not None and (finished(req) or rng.random() < 0.03):
                batch[i] = None
                removed.append(i)
        for _ in range(rng.randint(0, 3)):
            req = random_request(rng)
            if removed:  # a reused slot shows up only in `added`
                slot = removed.pop(rng.randrange(len(removed)))
                batch[slot] = req
            elif None in batch:
                slot = batch.index(None)  # a hole left by an earlier step's condense
                batch[slot] = req
            elif len(batch) < capacity:
                slot = len(batch)
                batch.append(req)
            else:
                break
            added.append((slot, req.params, req.prompt, req.out))
        # Condense: the last requests move into holes (unidirectional moves).
        while None in batch:
            hole = batch.index(None)
            last = len(batch) - 1
            if batch[last] is not None and hole < last:
                batch[hole], batch[last] = batch[last], None
                moved.append((last, hole, MoveDirectionality.UNIDIRECTIONAL))
            batch.pop()
        if len(batch) >= 2 and rng.random() < 0.3:
            a, b = rng.sample(range(len(batch)), 2)
            batch[a], batch[b] = batch[b], batch[a]
            moved.append((a, b, MoveDirectionality.SWAP))
        update = (
            BatchUpdate(len(batch), removed, added, moved) if removed or added or moved else None
        )
        proc.update_state(update)
        if not batch:
            continue
        logits = raw_logits(rng, len(batch))
        before = logits.clone()
        proc.apply(logits)
        for row, req in enumerate(batch):
            assert req is not None
            forced = expected_forced(req.args, req.out)
            forced_seen += forced is not None
            tail_seen += forced in END_SEQ[1:]
            check_row(before[row], logits[row], forced)
            req.out.append(next_token(rng, logits[row]))
    assert forced_seen > 50  # the fuzz reached the forcing paths
    assert tail_seen > 5  # ... including the later tokens of a multi-token closing


# --- Model Runner V2 -------------------------------------------------------------------


@pytest.mark.slow  # hundreds of random batch steps through the V2 adapter: ~4 s
def test_v2_adapter_persistent_batch() -> None:
    for seed in range(6):
        _run_v2(seed)


def _run_v2(seed: int) -> None:
    v2 = pytest.importorskip("kernels.elastic.vllm_v2")
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState

    rng = random.Random(seed)
    capacity, max_len = 8, 64
    tokens = torch.zeros(capacity, max_len, dtype=torch.int32)
    prompt_len = torch.zeros(capacity, dtype=torch.int32)
    total_len = torch.zeros(capacity, dtype=torch.int32)
    # Stand-ins with the attribute the adapter reads (.gpu), as vLLM's buffers have.
    req_states = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=capacity,
        vocab_size=VOCAB,
        all_token_ids=SimpleNamespace(gpu=tokens),  # type: ignore[arg-type]
        prompt_len=SimpleNamespace(gpu=prompt_len),  # type: ignore[arg-type]
        prefill_len=SimpleNamespace(gpu=prompt_len.clone()),  # type: ignore[arg-type]
        total_len=SimpleNamespace(gpu=total_len),  # type: ignore[arg-type]
    )
    proc = v2.ElasticLogitsProcessorV2(SimpleNamespace(), req_states)
    live: dict[int, Req] = {}
    free = list(range(capacity))
    forced_seen = preempted = tail_seen = 0

    def place(req: Req) -> None:
        slot = free.pop(rng.randrange(len(free)))
        # The runner writes the slot's tokens (prompt + any resumed output) first.
        seq = req.prompt + req.out
        tokens[slot].fill_(-7)  # stale garbage of a previous occupant beyond total_len
        tokens[slot, : len(seq)] = torch.tensor(seq, dtype=torch.int32)
        prompt_len[slot], total_len[slot] = len(req.prompt), len(seq)
        proc.add_request(slot, req.params)
        live[slot] = req

    for _step in range(300):
        for slot, req in list(live.items()):
            if finished(req) or rng.random() < 0.03:
                del live[slot]
                free.append(slot)
            elif rng.random() < 0.03 and len(free) > 0:
                # Preemption: the request comes back later in another slot, its
                # output re-prefilled after the prompt.
                del live[slot]
                free.append(slot)
                place(req)
                preempted += 1
        while free and rng.random() < 0.5:
            place(random_request(rng))
        proc.apply_staged_writes()
        scheduled = [s for s in live if rng.random() < 0.85]
        rng.shuffle(scheduled)
        if not scheduled:
            continue
        idx = torch.tensor(scheduled, dtype=torch.int32)
        ctx = LogitsContext(
            expanded_idx_mapping=idx,
            idx_mapping=idx,
            idx_mapping_np=np.array(scheduled, dtype=np.int32),
            expanded_local_pos=torch.zeros(len(scheduled), dtype=torch.int32),
            input_ids=tokens[idx.long(), (total_len[idx.long()] - 1).clamp(min=0).long()],
            pos=total_len[idx.long()] - 1,
            seq_lens_upper_bound_np=total_len[idx.long()].numpy(),
        )
        logits = raw_logits(rng, len(scheduled))
        before = logits.clone()
        proc.apply(logits, ctx)
        for row, slot in enumerate(scheduled):
            req = live[slot]
            forced = expected_forced(req.args, req.out)
            forced_seen += forced is not None
            tail_seen += forced in END_SEQ[1:]
            check_row(before[row], logits[row], forced)
            tok = next_token(rng, logits[row])
            req.out.append(tok)
            tokens[slot, int(total_len[slot])] = tok
            total_len[slot] += 1
    assert forced_seen > 50 and preempted > 0 and tail_seen > 5


def test_v2_adapter_never_raises() -> None:
    v2 = pytest.importorskip("kernels.elastic.vllm_v2")
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState

    broken = SimpleNamespace(gpu=None)  # the tracking op will fail on it
    req_states = LogitsProcRequestState(
        device=torch.device("cpu"),
        max_num_reqs=2,
        vocab_size=VOCAB,
        all_token_ids=broken,  # type: ignore[arg-type]
        prompt_len=broken,  # type: ignore[arg-type]
        prefill_len=broken,  # type: ignore[arg-type]
        total_len=broken,  # type: ignore[arg-type]
    )
    proc = v2.ElasticLogitsProcessorV2(SimpleNamespace(), req_states)
    params = SamplingParams(
        extra_args={keys.THINKING_BUDGET: 0, keys.THINK_END_ID: END, keys.EOS_ID: EOS}
    )
    assert proc.add_request(1, params) is True
    assert proc.add_request(0, SamplingParams()) is False
    proc.apply_staged_writes()
    idx = torch.tensor([1, 0], dtype=torch.int32)
    ctx = LogitsContext(idx, idx, np.array([1, 0]), idx, idx, idx, np.array([1, 1]))
    logits = torch.randn(2, VOCAB)
    before = logits.clone()
    assert proc.apply(logits, ctx) is logits
    assert torch.equal(logits, before)
