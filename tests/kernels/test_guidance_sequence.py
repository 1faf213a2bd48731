"""Budget guidance with a closing ``</think>`` of several tokens: thinking ends at the
sequence's last token (V1 host tracking, V2 device tracking), not at a partial prefix."""

from __future__ import annotations

import torch
from guidance_fixtures import NEWLINE, VOCAB, tiny_predictor, v2_processor
from vllm import SamplingParams
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

from kernels.guidance import args as guidance_args
from kernels.guidance.stash import GuidanceModel
from kernels.guidance.state import GuidanceCol
from kernels.guidance.vllm_v1 import _Track

SEQ = (4, 11)
PROMPT_LEN = 3


def model() -> GuidanceModel:
    boundary = torch.zeros(VOCAB, dtype=torch.bool)
    boundary[NEWLINE] = True
    return GuidanceModel(
        predictor=tiny_predictor(),
        think_end_id=SEQ[0],
        think_end_ids=SEQ,
        boundary=boundary,
        boundary_ids=frozenset({NEWLINE}),
    )


def test_v1_track_closes_at_the_whole_sequence() -> None:
    m = model()
    out = [1, 4, 2, 4]
    track = _Track(out, thinking=True)
    track.step(m)
    assert track.thinking and track.used == 4  # "4" alone, twice: still thinking
    out += [NEWLINE]
    track.step(m)
    assert track.thinking and track.boundary
    out += [4, 11, NEWLINE]
    track.step(m)
    assert not track.thinking and track.used == 5  # the closing's tokens are not thinking


def test_guidance_model_defaults_to_one_token() -> None:
    m = GuidanceModel(
        predictor=tiny_predictor(),
        think_end_id=4,
        boundary=torch.zeros(VOCAB, dtype=torch.bool),
        boundary_ids=frozenset(),
    )
    assert m.think_end_ids == (4,) and len(m.closing) == 1


def test_v2_step_closes_only_after_the_whole_sequence() -> None:
    slots, width = 2, 16
    history = torch.zeros(slots, width, dtype=torch.int32)
    proc, _ = v2_processor(slots, PROMPT_LEN, history)
    for slot in range(slots):
        assert proc.add_request(slot, SamplingParams(extra_args={guidance_args.BUDGET: 50}))
    proc.apply_staged_writes()
    # Slot 0 generated "4 11" (closing); slot 1 generated "2 11" (no closing).
    history[0, PROMPT_LEN : PROMPT_LEN + 2] = torch.tensor(SEQ, dtype=torch.int32)
    history[1, PROMPT_LEN : PROMPT_LEN + 2] = torch.tensor([2, 11], dtype=torch.int32)
    mapping = torch.tensor([1, 0], dtype=torch.int32)
    pos = torch.tensor([PROMPT_LEN + 1, PROMPT_LEN + 1], dtype=torch.int64)
    ctx = LogitsContext(
        expanded_idx_mapping=mapping,
        idx_mapping=mapping,
        idx_mapping_np=mapping.numpy(),
        expanded_local_pos=torch.zeros(2, dtype=torch.int32),
        input_ids=torch.tensor([11, 11], dtype=torch.int32),
        pos=pos,
        seq_lens_upper_bound_np=(pos + 1).numpy(),
    )
    boundary = torch.zeros(VOCAB, dtype=torch.bool)
    boundary[NEWLINE] = True
    proc._step(ctx, SEQ, boundary)
    assert proc._state.device[GuidanceCol.CLOSED].tolist() == [1, 0]
    # Slot 1 is still thinking: a newline next is a guided boundary; slot 0 is not.
    history[:, PROMPT_LEN + 2] = NEWLINE
    ctx.input_ids.fill_(NEWLINE)
    ctx.pos.add_(1)
    budget, _ = proc._step(ctx, SEQ, boundary)
    assert budget.tolist() == [47, 0]  # rows: slot 1 (b = 50 - 3), slot 0 (closed)
