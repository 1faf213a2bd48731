"""Elastic Reasoning with a closing ``</think>`` of several tokens, on hand-built batches.

The model's preferences are scripted per row (the token it would pick); the adapter's
processed logits decide what is actually sampled, as in an engine. Rows join, leave,
swap and are preempted between steps (V1), and every step is also checked against the
per-request spec model of ``elastic_spec``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from elastic_spec import check_row, expected_forced
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from kernels.elastic import args as keys
from kernels.elastic.args import ElasticArgs, parse
from kernels.elastic.mask import elastic_forced_tokens
from kernels.elastic.state import ElasticCol, new_state, row_values
from kernels.elastic.track import elastic_track_ref
from kernels.elastic.vllm_v1 import ElasticLogitsProcessor

VOCAB = 12
EOS, FILLER = 2, 7
SEQ = (4, 5, 4, 6)  # overlaps itself: "4 5 4 5" must fall back to "4 5", not to nothing

Prefer = Callable[[list[int]], int]  # the token the "model" wants next, given its output


def params(t: int, s: int | None = None, seq: tuple[int, ...] = SEQ) -> SamplingParams:
    extra: dict[str, int | str] = {keys.THINKING_BUDGET: t, keys.EOS_ID: EOS}
    extra[keys.THINK_END_IDS] = ",".join(map(str, seq))
    if s is not None:
        extra[keys.SOLUTION_BUDGET] = s
    return SamplingParams(extra_args=extra)


def processor(capacity: int = 4) -> ElasticLogitsProcessor:
    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=capacity),
        model_config=SimpleNamespace(get_vocab_size=lambda: VOCAB),
    )
    return ElasticLogitsProcessor(config, torch.device("cpu"), False)  # type: ignore[arg-type]


def step(
    proc: ElasticLogitsProcessor,
    batch: list[tuple[ElasticArgs | None, list[int], Prefer]],
    update: BatchUpdate | None = None,
) -> None:
    """One engine step: bookkeeping, the mask, then each row samples its argmax."""
    proc.update_state(update)
    logits = torch.zeros(len(batch), VOCAB)
    for row, (_, out, prefer) in enumerate(batch):
        logits[row, prefer(out)] = 5.0
    before = logits.clone()
    proc.apply(logits)
    for row, (args, out, _) in enumerate(batch):
        check_row(before[row], logits[row], expected_forced(args, out))
        out.append(int(logits[row].argmax()))


def filler(out: list[int]) -> int:
    return FILLER


def run_one(p: SamplingParams, prefer: Prefer, steps: int) -> list[int]:
    proc, out = processor(), list[int]()
    args = parse(p.extra_args)
    step(proc, [(args, out, prefer)], BatchUpdate(1, [], [(0, p, [1, 1], out)], []))
    for _ in range(steps - 1):
        step(proc, [(args, out, prefer)])
    return out


def occurrences(out: list[int], seq: tuple[int, ...] = SEQ) -> list[int]:
    return [i for i in range(len(out) - len(seq) + 1) if tuple(out[i : i + len(seq)]) == seq]


@pytest.mark.parametrize("t", [0, 1, 3, 6])
def test_budget_forces_the_whole_sequence_once(t: int) -> None:
    out = run_one(params(t, s=2), filler, steps=t + len(SEQ) + 3)  # EOS ends a request
    assert occurrences(out) == [t]  # exactly once, right after t thinking tokens
    assert out[t + len(SEQ) :] == [FILLER, FILLER, EOS]  # s = 2, then EOS


def test_natural_sequence_switches_phase_at_its_last_token() -> None:
    script = [FILLER, *SEQ]

    def prefer(out: list[int]) -> int:
        return script[len(out)] if len(out) < len(script) else FILLER

    out = run_one(params(10, s=1), prefer, steps=7)
    assert out == [FILLER, *SEQ, FILLER, EOS]  # s counts from after the sequence


def test_partial_prefix_then_divergence_is_still_thinking() -> None:
    script = [4, 5, 4, 5, FILLER]  # "4 5 4" then 5, not 6: no closing yet

    def prefer(out: list[int]) -> int:
        return script[len(out)] if len(out) < len(script) else FILLER

    out = run_one(params(6, s=0), prefer, steps=12)
    assert out[:6] == [4, 5, 4, 5, FILLER, FILLER]
    assert occurrences(out) == [6] and out[10] == EOS


def test_budget_running_out_mid_prefix_finishes_that_prefix() -> None:
    def prefer(out: list[int]) -> int:
        return (FILLER, 4, 5)[len(out)] if len(out) < 3 else FILLER

    out = run_one(params(3, s=0), prefer, steps=6)
    # "4 5" was the model's own; the mask forces only the missing "4 6".
    assert out == [FILLER, 4, 5, 4, 6, EOS]
    assert occurrences(out) == [1]


def test_across_batch_changes_and_preemption() -> None:
    """Rows join, swap, leave and come back (preempted: re-added with their output)."""
    proc = processor(capacity=4)
    pa, pb, pc = params(2, s=1), params(4, s=2), params(1, seq=(9,))
    a, b, c = parse(pa.extra_args), parse(pb.extra_args), parse(pc.extra_args)
    out_a: list[int] = []
    out_b: list[int] = []
    out_c: list[int] = []
    step(proc, [(a, out_a, filler)], BatchUpdate(1, [], [(0, pa, [1], out_a)], []))
    step(
        proc,
        [(a, out_a, filler), (b, out_b, filler)],
        BatchUpdate(2, [], [(1, pb, [1], out_b)], []),
    )
    # a is mid-sequence (forced "4" at step 3); swap the rows.
    step(
        proc,
        [(b, out_b, filler), (a, out_a, filler)],
        BatchUpdate(2, [], [], [(0, 1, MoveDirectionality.SWAP)]),
    )
    # b is preempted (removed); c (one-token closing) joins in its slot.
    step(
        proc,
        [(c, out_c, filler), (a, out_a, filler)],
        BatchUpdate(2, [0], [(0, pc, [1], out_c)], []),
    )
    # c leaves, b resumes in slot 0 with its output so far; a moves down to slot 1 again.
    step(
        proc,
        [(b, out_b, filler), (a, out_a, filler)],
        BatchUpdate(2, [0], [(0, pb, [1], out_b)], []),
    )
    for _ in range(8):
        step(proc, [(b, out_b, filler), (a, out_a, filler)])
    assert occurrences(out_a) == [2] and out_a[6:8] == [FILLER, EOS]
    assert occurrences(out_b) == [4] and out_b[8:11] == [FILLER, FILLER, EOS]
    assert out_c == [FILLER]


def test_track_ref_and_mask_follow_a_partial_match() -> None:
    """V2's torch tracking: MATCHED after "4 5" is 2, so the mask forces "4"; a complete
    sequence straddling the prompt's end does not count."""
    state = new_state(2, torch.device("cpu"))
    args = parse(params(1).extra_args)
    assert args is not None
    state.write(0, row_values(args))
    state.write(1, row_values(args))
    tokens = torch.tensor([[1, FILLER, 4, 5, 0, 0], [4, 5, 4, 6, FILLER, 0]], dtype=torch.int32)
    prompt_len = torch.tensor([1, 2], dtype=torch.int32)  # row 1: "4 5" is prompt
    total_len = torch.tensor([4, 5], dtype=torch.int32)
    idx = torch.tensor([0, 1], dtype=torch.int32)
    elastic_track_ref(state.device, idx, tokens, prompt_len, total_len, max_end_len=len(SEQ))
    table = state.device
    assert table[ElasticCol.MATCHED].tolist() == [2, 0]
    assert table[ElasticCol.THINK_END_POS].tolist() == [-1, -1]
    assert elastic_forced_tokens(table, idx, 2).tolist() == [4, 4]
    # Generated tokens complete it: the answer phase starts after its last token.
    tokens[0, 4], tokens[0, 5] = 4, 6
    total_len[0] = 6
    elastic_track_ref(state.device, idx, tokens, prompt_len, total_len, max_end_len=len(SEQ))
    assert table[ElasticCol.THINK_END_POS, 0] == 5 and table[ElasticCol.USED, 0] == 0
    assert table[ElasticCol.MATCHED, 0] == 0


def test_one_token_rows_keep_the_state_at_rest() -> None:
    args = parse({keys.THINKING_BUDGET: 1, keys.THINK_END_ID: 4, keys.EOS_ID: EOS})
    assert args is not None and args.think_end_ids == (4,)
    values = np.asarray(row_values(args))
    assert values[ElasticCol.END_LEN] == 1 and not values[ElasticCol.END_TAIL :].any()


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({keys.THINK_END_IDS: 5}, "string"),
        ({keys.THINK_END_IDS: "4,x"}, "comma-separated"),
        ({keys.THINK_END_IDS: ",".join(["4"] * (keys.MAX_THINK_END_TOKENS + 1))}, "at most|1 to"),
        ({keys.THINK_END_IDS: "4,5", keys.THINK_END_ID: 5}, "disagree"),
    ],
)
def test_bad_sequence_args_are_refused(extra: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse({keys.THINKING_BUDGET: 1, keys.EOS_ID: EOS, **extra})


def test_sequence_args_parse() -> None:
    parsed = parse({keys.THINKING_BUDGET: 1, keys.EOS_ID: EOS, keys.THINK_END_IDS: "4, 5,6"})
    assert parsed is not None
    assert parsed.think_end_ids == (4, 5, 6) and parsed.think_end_id == 4
