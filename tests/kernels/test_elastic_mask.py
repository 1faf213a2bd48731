"""The batched torch mask op against the per-request spec model, and its contracts."""

from __future__ import annotations

import random

import pytest
import torch
from elastic_spec import check_row, expected_forced

from kernels.elastic.args import ElasticArgs
from kernels.elastic.mask import apply_elastic_mask, elastic_mask_ref
from kernels.elastic.state import ANSWER, THINKING, ElasticCol, new_state, row_values
from kernels.row_state import RowState

CPU = torch.device("cpu")


def _random_rows(
    rng: random.Random, capacity: int, vocab: int
) -> tuple[RowState, list[tuple[ElasticArgs | None, list[int]]]]:
    """A state with random requests, each with a random history; and the model's view."""
    state = new_state(capacity, CPU)
    rows: list[tuple[ElasticArgs | None, list[int]]] = []
    for row in range(capacity):
        if rng.random() < 0.25:
            rows.append((None, []))
            continue
        end, eos = rng.sample(range(vocab), 2)
        args = ElasticArgs(
            thinking_budget=rng.randint(0, 6),
            solution_budget=rng.choice([None, 0, 1, 3]),
            think_end_id=end,
            eos_id=eos,
            thinking_open=rng.random() < 0.8,
        )
        out = [rng.choice([end, eos, (end + 1) % vocab]) for _ in range(rng.randint(0, 10))]
        rows.append((args, out))
        state.write(row, row_values(args))
        # Phase bookkeeping as the V1 adapter does it (a natural </think> ends thinking).
        thinking = args.thinking_open and end not in out
        used = len(out) - out.index(end) - 1 if args.thinking_open and end in out else len(out)
        state.set_column(ElasticCol.PHASE, [row], [THINKING if thinking else ANSWER])
        state.set_column(ElasticCol.USED, [row], [used])
    state.flush()
    return state, rows


@pytest.mark.parametrize("vocab", [1, 7, 72, 1000, 3001])
@pytest.mark.parametrize("seed", range(4))
def test_matches_spec_model(vocab: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + vocab)
    capacity = rng.randint(1, 24)
    state, rows = _random_rows(rng, capacity, max(vocab, 2))
    num_rows = rng.randint(0, capacity)
    logits = torch.randn(num_rows, vocab, generator=torch.Generator().manual_seed(seed))
    before = logits.clone()
    out = elastic_mask_ref(logits, state.device)
    assert out is logits  # in place
    for row in range(num_rows):
        args, history = rows[row]
        forced = expected_forced(args, history)
        if forced is not None and forced >= vocab:
            forced = None  # out-of-vocab ids leave the row alone
        check_row(before[row], logits[row], forced)


def test_mapping_reads_slots_not_rows() -> None:
    rng = random.Random(7)
    state, rows = _random_rows(rng, 16, 50)
    mapping = torch.tensor(rng.sample(range(16), 10), dtype=torch.int32)
    logits = torch.randn(10, 50)
    before = logits.clone()
    apply_elastic_mask(logits, state.device, mapping)
    for row, slot in enumerate(mapping.tolist()):
        check_row(before[row], logits[row], expected_forced(*rows[slot]))


def test_forced_token_stays_finite_when_already_masked() -> None:
    state = new_state(2, CPU)
    args = ElasticArgs(thinking_budget=0, solution_budget=None, think_end_id=3, eos_id=1)
    state.write(0, row_values(args))
    state.flush()
    logits = torch.full((1, 8), float("-inf"))
    elastic_mask_ref(logits, state.device)
    assert logits[0, 3] == 0.0 and torch.isfinite(logits[0]).sum() == 1


def test_special_values_in_free_rows_survive() -> None:
    # NaN, -0.0 and inf in a free row must come back bit for bit.
    state = new_state(2, CPU)
    logits = torch.tensor([[float("nan"), -0.0, float("inf"), 1.5]])
    before = logits.clone()
    elastic_mask_ref(logits, state.device)
    assert torch.equal(before.view(torch.int32), logits.view(torch.int32))


def test_row_state_move_swap_clear() -> None:
    state = RowState((0, 7), capacity=4, device=CPU)
    state.write(1, (1, 10))
    state.write(2, (1, 20))
    assert state.active_count == 2
    state.swap(1, 2)
    assert state.host_np[1, 1] == 20 and state.host_np[1, 2] == 10
    state.move(2, 3)
    assert state.host_np[:, 3].tolist() == [1, 10] and state.host_np[:, 2].tolist() == [0, 7]
    assert state.active_count == 2
    state.move(1, 3)  # overwrites an active row
    assert state.active_count == 1
    state.clear(3)
    assert state.active_count == 0


@pytest.mark.parametrize("seed", range(3))
def test_cpu_indexed_and_branch_free_paths_agree(seed: int) -> None:
    from kernels.elastic.mask import (
        _force_rows_branch_free,
        _force_rows_indexed,
        elastic_forced_tokens,
    )

    rng = random.Random(seed)
    state, _rows = _random_rows(rng, 20, 333)
    logits = torch.randn(20, 333)
    forced = elastic_forced_tokens(state.device, None, 20)
    hit = (forced >= 0) & (forced < 333)
    assert hit.any() and not hit.all()
    a, b = logits.clone(), logits.clone()
    _force_rows_indexed(a, forced, hit)
    _force_rows_branch_free(b, forced, hit)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_a_thinking_minimum_masks_the_end_and_eos_until_spent() -> None:
    state = new_state(4, CPU)
    held = ElasticArgs(
        thinking_budget=10, solution_budget=None, think_end_id=3, eos_id=5, thinking_min=4
    )
    for row in range(4):
        state.write(row, row_values(held))
    # rows: 2 thinking tokens used (held), 4 used (free), thinking at t (forced), answering
    state.set_column(ElasticCol.USED, [0, 1, 2, 3], [2, 4, 10, 2])
    state.set_column(ElasticCol.PHASE, [0, 1, 2, 3], [THINKING, THINKING, THINKING, ANSWER])
    state.flush()
    logits = torch.zeros(4, 8)
    apply_elastic_mask(logits, state.device, minimum=True)
    assert logits[0, 3] == float("-inf") and logits[0, 5] == float("-inf")
    assert torch.isfinite(logits[0, [0, 1, 2, 4, 6, 7]]).all()
    assert torch.equal(logits[1], torch.zeros(8))  # minimum spent: untouched
    assert logits[2, 3] == 0.0 and torch.isinf(logits[2, [0, 1, 2, 4, 5]]).all()  # forced
    assert torch.equal(logits[3], torch.zeros(8))
    # Without the flag (no row of the batch holds a minimum) nothing is held back.
    plain = torch.zeros(4, 8)
    apply_elastic_mask(plain, state.device)
    assert plain[0, 3] == 0.0
