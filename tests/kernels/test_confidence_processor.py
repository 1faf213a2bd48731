"""The confidence early-stop processor (DeepConf online) on hand-built batches, no engine.

Properties: a row whose window stays confident is never touched; a row whose window mean
falls below its threshold is ended (EOS forced) at that very step, never before a full
window; rows of other requests are untouched; the window follows its request through
batch adds, removals, moves and swaps; decoding is bit-identical when no row opts in;
the op agrees with the gateway's pure-Python definition (core.token_confidence); the
V2 adapter decides as V1 does with slots mapped in a shuffled order; apply never raises.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

from core import token_confidence as ref
from kernels.confidence import args as conf_args
from kernels.confidence.ops import token_confidence
from kernels.confidence.vllm_v1 import ConfidenceLogitsProcessor
from kernels.confidence.vllm_v2 import ConfidenceLogitsProcessorV2

VOCAB = 64
EOS = 3
PROMPT_LEN = 5


def _processor(capacity: int = 8) -> ConfidenceLogitsProcessor:
    config: Any = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=capacity),
        model_config=SimpleNamespace(get_vocab_size=lambda: VOCAB),
    )
    return ConfidenceLogitsProcessor(config, torch.device("cpu"), False)


def _params(threshold: float | None, window: int = 4, top_k: int = 5) -> SamplingParams:
    if threshold is None:
        return SamplingParams()
    args = conf_args.extra_args(
        conf_args.ConfidenceArgs(threshold=threshold, window=window, top_k=top_k, eos_id=EOS)
    )
    return SamplingParams(extra_args=args)


def _peaked(gen: torch.Generator) -> torch.Tensor:
    """A confident step: one candidate far ahead (confidence ~ 16 at k = 5)."""
    row = torch.randn(VOCAB, generator=gen)
    row[int(torch.randint(0, VOCAB, (1,), generator=gen))] += 20.0
    return row


def _flat(gen: torch.Generator) -> torch.Tensor:
    """An unsure step: nearly uniform (confidence ~ log(64) = 4.2)."""
    return 0.01 * torch.randn(VOCAB, generator=gen)


def _step(
    proc: ConfidenceLogitsProcessor, rows: list[torch.Tensor], update: BatchUpdate | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    proc.update_state(update)
    logits = torch.stack(rows)
    before = logits.clone()
    return before, proc.apply(logits)


def _stopped(row: torch.Tensor) -> bool:
    return bool(row[EOS] == 0) and bool(torch.isinf(row).sum() == VOCAB - 1)


def test_token_confidence_is_the_gateways_definition() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, VOCAB, generator=gen) * 3
    ks = torch.tensor([1, 2, 5, 5, 20, 7])
    got = token_confidence(logits, ks, 20)
    lp = torch.log_softmax(logits, dim=-1)
    for r in range(6):
        want = ref.token_confidence(lp[r].tolist(), int(ks[r]))
        assert got[r].item() == pytest.approx(want, rel=1e-5)


def test_confident_rows_untouched_unsure_row_ended_at_its_full_window() -> None:
    gen = torch.Generator().manual_seed(1)
    proc = _processor()
    outs: list[list[int]] = [[], [], []]
    added = [
        (0, _params(8.0), None, outs[0]),  # stays confident: never touched
        (1, _params(8.0), None, outs[1]),  # unsure: ended once 4 tokens are seen
        (2, _params(None), None, outs[2]),  # another request, not opted in
    ]
    update: BatchUpdate | None = BatchUpdate(3, [], added, [])
    for step in range(4):
        before, after = _step(proc, [_peaked(gen), _flat(gen), _flat(gen)], update)
        update = None
        assert torch.equal(after[0], before[0])
        assert torch.equal(after[2], before[2])
        if step < 3:  # window not full yet: never stopped before w tokens
            assert torch.equal(after[1], before[1])
        else:
            assert _stopped(after[1])
        for out in outs:
            out.append(7)


def test_bit_identical_when_no_row_opts_in() -> None:
    gen = torch.Generator().manual_seed(2)
    proc = _processor()
    outs: list[list[int]] = [[], []]
    update: BatchUpdate | None = BatchUpdate(
        2, [], [(0, _params(None), None, outs[0]), (1, _params(None), None, outs[1])], []
    )
    for _ in range(6):
        before, after = _step(proc, [_flat(gen), _flat(gen)], update)
        update = None
        assert torch.equal(after, before)
        for out in outs:
            out.append(1)


def test_window_follows_its_request_through_move_swap_and_removal() -> None:
    gen = torch.Generator().manual_seed(3)
    proc = _processor()
    a: list[int] = []
    b: list[int] = []
    # a: 3 unsure tokens; b: 3 confident tokens. Threshold 8, window 4.
    update: BatchUpdate | None = BatchUpdate(
        2, [], [(0, _params(8.0), None, a), (1, _params(8.0), None, b)], []
    )
    for _ in range(3):
        _, after = _step(proc, [_flat(gen), _peaked(gen)], update)
        update = None
        assert not _stopped(after[0]) and not _stopped(after[1])
        a.append(7)
        b.append(7)
    # Swap: a is now row 1, b row 0. a's 4th unsure token ends it at row 1; b's 4th
    # token is unsure too, but its window (3 confident + 1 unsure) stays above 8.
    update = BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)])
    _, after = _step(proc, [_flat(gen), _flat(gen)], update)
    assert _stopped(after[1]) and not _stopped(after[0])
    a.append(EOS)
    b.append(7)
    # a leaves; b moves to row 1 (unidirectional) and keeps its window: two more unsure
    # tokens make its mean (2*16 + 2*4.2)/4 ~ 10 > 8, then (16 + 3*4.2)/4 ~ 7 < 8.
    update = BatchUpdate(2, [1], [], [(0, 1, MoveDirectionality.UNIDIRECTIONAL)])
    _, after = _step(proc, [torch.zeros(VOCAB), _flat(gen)], update)
    assert not _stopped(after[1])
    b.append(7)
    _, after = _step(proc, [torch.zeros(VOCAB), _flat(gen)])
    assert _stopped(after[1])
    assert not _stopped(after[0])  # the freed row belongs to no request


def test_a_re_added_row_restarts_its_window() -> None:
    """Preempted and resumed with 6 tokens already out: a fresh window, a full one again
    before any stop (zeros of a reset ring never count as confidence)."""
    gen = torch.Generator().manual_seed(4)
    proc = _processor()
    out = [7] * 6
    update: BatchUpdate | None = BatchUpdate(1, [], [(0, _params(8.0), None, out)], [])
    for step in range(4):
        _, after = _step(proc, [_flat(gen)], update)
        update = None
        assert _stopped(after[0]) == (step == 3)
        out.append(7)


def _reference_stop(confs: list[float], window: int, threshold: float) -> int | None:
    """The first step at which the gateway's definition says the window mean is below."""
    for i in range(window - 1, len(confs)):
        if ref.group_confidences(confs[i - window + 1 : i + 1], window)[0] < threshold:
            return i
    return None


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_against_the_gateways_definition(seed: int) -> None:
    """Random rows, windows and k; rows join over time; each stops exactly where the
    pure-Python definition over the same token confidences says."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    proc = _processor(capacity=6)
    rows = 5
    spec = [(rng.randint(1, 6), rng.randint(1, 8), rng.uniform(4.5, 12.0)) for _ in range(rows)]
    outs: list[list[int]] = [[] for _ in range(rows)]
    confs: list[list[float]] = [[] for _ in range(rows)]
    ended: list[int | None] = [None] * rows
    joined: set[int] = set()
    for step in range(14):
        added = []
        for r in range(rows):
            if r not in joined and step >= r:
                window, k, thr = spec[r]
                added.append((r, _params(thr, window=window, top_k=k), None, outs[r]))
                joined.add(r)
        update = BatchUpdate(rows, [], added, []) if added else None
        logits = [_peaked(gen) if rng.random() < 0.5 else _flat(gen) for _ in range(rows)]
        before, after = _step(proc, logits, update)
        lp = torch.log_softmax(before, dim=-1)
        for r in sorted(joined):
            if ended[r] is not None:
                continue
            window, k, thr = spec[r]
            confs[r].append(ref.token_confidence(lp[r].tolist(), k))
            want = _reference_stop(confs[r], window, thr)
            if _stopped(after[r]):
                assert want == len(confs[r]) - 1, (r, confs[r], spec[r])
                ended[r] = step
            else:
                assert want is None, (r, confs[r], spec[r])
                assert torch.equal(after[r], before[r])
            outs[r].append(EOS if ended[r] is not None else 7)


def test_validate_params_refuses_bad_arguments() -> None:
    bad: list[dict[str, Any]] = [
        {conf_args.THRESHOLD: "5"},
        {
            conf_args.THRESHOLD: float("nan"),
            conf_args.WINDOW: 4,
            conf_args.TOP_K: 5,
            conf_args.EOS_ID: 1,
        },
        {conf_args.THRESHOLD: 5.0, conf_args.WINDOW: 0, conf_args.TOP_K: 5, conf_args.EOS_ID: 1},
        {conf_args.THRESHOLD: 5.0, conf_args.WINDOW: 4, conf_args.TOP_K: 21, conf_args.EOS_ID: 1},
        {conf_args.THRESHOLD: 5.0, conf_args.WINDOW: 4, conf_args.TOP_K: 5},
        {conf_args.WINDOW: 4},
    ]
    for extra in bad:
        with pytest.raises(ValueError):
            ConfidenceLogitsProcessor.validate_params(SamplingParams(extra_args=extra))
    ConfidenceLogitsProcessor.validate_params(SamplingParams(extra_args={"other": 1}))


def test_apply_never_raises() -> None:
    proc = _processor()
    out: list[int] = []
    proc.update_state(BatchUpdate(1, [], [(0, _params(8.0), None, out)], []))
    broken = torch.zeros(1, 2)  # fewer columns than the EOS id: the op fails inside
    assert proc.apply(broken) is broken
    # After a failure every row is dropped (its trace goes on unguarded): the next step
    # leaves even an unsure row's logits alone, and the table says no row is active.
    assert proc._rows == {} and proc._state.table.active_count == 0
    gen = torch.Generator().manual_seed(3)
    for _ in range(6):
        out.append(7)
        before, after = _step(proc, [_flat(gen)], None)
        assert torch.equal(after, before)


def _v2(slots: int) -> tuple[ConfidenceLogitsProcessorV2, Any]:
    lengths = torch.full((slots,), PROMPT_LEN, dtype=torch.int32)
    total = lengths.clone()
    rs: Any = SimpleNamespace(
        device=torch.device("cpu"),
        max_num_reqs=slots,
        vocab_size=VOCAB,
        prompt_len=SimpleNamespace(gpu=lengths, np=lengths.numpy()),
        total_len=SimpleNamespace(gpu=total, np=total.numpy()),
    )
    return ConfidenceLogitsProcessorV2(None, rs), rs  # type: ignore[arg-type]


def _ctx(slots: list[int]) -> LogitsContext:
    mapping = torch.tensor(slots, dtype=torch.int32)
    return LogitsContext(
        expanded_idx_mapping=mapping,
        idx_mapping=mapping,
        idx_mapping_np=mapping.numpy(),
        expanded_local_pos=torch.zeros(len(slots), dtype=torch.int32),
        input_ids=torch.zeros(len(slots), dtype=torch.int32),
        pos=torch.zeros(len(slots), dtype=torch.int64),
        seq_lens_upper_bound_np=torch.ones(len(slots), dtype=torch.int64).numpy(),
    )


def test_v2_decides_as_the_definition_with_shuffled_slots() -> None:
    gen = torch.Generator().manual_seed(5)
    rng = random.Random(5)
    proc, rs = _v2(8)
    slots = [6, 1, 4]
    spec = {6: (3, 5, 8.0), 1: (5, 2, 6.0), 4: (2, 20, 9.0)}
    for slot, (window, k, thr) in spec.items():
        assert proc.add_request(slot, _params(thr, window=window, top_k=k))
    assert not proc.add_request(0, _params(None))
    proc.apply_staged_writes()
    confs: dict[int, list[float]] = {s: [] for s in slots}
    live = list(slots)
    for _ in range(10):
        if not live:
            break
        rng.shuffle(live)
        logits = torch.stack([_peaked(gen) if rng.random() < 0.4 else _flat(gen) for _ in live])
        before = logits.clone()
        after = proc.apply(logits, _ctx(live))
        lp = torch.log_softmax(before, dim=-1)
        for r, slot in enumerate(list(live)):
            window, k, thr = spec[slot]
            confs[slot].append(ref.token_confidence(lp[r].tolist(), k))
            want = _reference_stop(confs[slot], window, thr)
            if _stopped(after[r]):
                assert want == len(confs[slot]) - 1
                live.remove(slot)
            else:
                assert want is None and torch.equal(after[r], before[r])
            rs.total_len.gpu[slot] += 1


def test_v2_batch_without_opted_in_slots_is_untouched() -> None:
    proc, _ = _v2(4)
    proc.add_request(2, _params(None))
    proc.apply_staged_writes()
    logits = torch.randn(2, VOCAB)
    before = logits.clone()
    assert torch.equal(proc.apply(logits, _ctx([2, 3])), before)
