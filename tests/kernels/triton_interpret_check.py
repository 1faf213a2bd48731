"""Triton kernels vs torch ops on CPU tensors; run by test_elastic_triton.py in a child
process with TRITON_INTERPRET=1 (the variable must be set before triton is imported,
and must not leak into the vLLM engines other tests start).

Exit status 0 and a last line "ok <cases>" when every case matches exactly.
"""

from __future__ import annotations

import os
import random
import sys

import torch

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

from kernels.elastic.args import ElasticArgs  # noqa: E402
from kernels.elastic.mask import elastic_mask_ref  # noqa: E402
from kernels.elastic.mask_triton import apply_elastic_mask_triton  # noqa: E402
from kernels.elastic.state import ElasticCol, new_state, row_values  # noqa: E402
from kernels.elastic.track import elastic_track_ref  # noqa: E402
from kernels.elastic.track_triton import apply_elastic_track_triton  # noqa: E402

CPU = torch.device("cpu")


def random_state(rng: random.Random, capacity: int, vocab: int) -> torch.Tensor:
    state = new_state(capacity, CPU)
    for row in range(capacity):
        if rng.random() < 0.3:
            continue
        args = ElasticArgs(
            thinking_budget=rng.randint(0, 5),
            solution_budget=rng.choice([None, 0, 2, 4]),
            think_end_id=rng.randrange(vocab + 2),  # sometimes out of vocab
            eos_id=rng.randrange(vocab),
            thinking_open=rng.random() < 0.8,
        )
        state.write(row, row_values(args))
        state.set_column(ElasticCol.PHASE, [row], [rng.randint(0, 1)])
        state.set_column(ElasticCol.USED, [row], [rng.randint(0, 6)])
    state.flush()
    return state.device


def check_mask(rng: random.Random) -> None:
    vocab = rng.choice([1, 3, 100, 1000, 2047, 2048, 2049, 5003])
    capacity = rng.randint(1, 12)
    table = random_state(rng, capacity, vocab)
    mapping = None
    num_rows = rng.randint(0, capacity)
    if rng.random() < 0.5:
        mapping = torch.tensor(rng.sample(range(capacity), num_rows), dtype=torch.int32)
    logits = torch.randn(num_rows, vocab)
    a, b = logits.clone(), logits.clone()
    elastic_mask_ref(a, table, mapping)
    apply_elastic_mask_triton(b, table, mapping)
    assert torch.equal(a.view(torch.int32), b.view(torch.int32)), (vocab, capacity, mapping)


def check_track(rng: random.Random) -> None:
    capacity, max_len, end = rng.randint(1, 10), rng.choice([17, 200, 300]), 5
    table = random_state(rng, capacity, 8)
    table[ElasticCol.THINK_END_ID] = end
    table[ElasticCol.THINK_END_POS] = torch.tensor(
        [rng.choice([-1, -1, 3]) for _ in range(capacity)], dtype=torch.int32
    )
    prompt_len = torch.tensor([rng.randint(1, 8) for _ in range(capacity)], dtype=torch.int32)
    total_len = prompt_len + torch.tensor(
        [rng.randint(0, max_len - 9) for _ in range(capacity)], dtype=torch.int32
    )
    table[ElasticCol.SCAN_POS] = torch.tensor(
        [rng.randint(0, int(t)) for t in total_len], dtype=torch.int32
    )
    tokens = torch.randint(0, 8, (capacity, max_len), dtype=torch.int32)
    mapping = torch.tensor(rng.sample(range(capacity), rng.randint(0, capacity)), dtype=torch.int32)
    a, b = table.clone(), table.clone()
    elastic_track_ref(a, mapping, tokens, prompt_len, total_len)
    apply_elastic_track_triton(b, mapping, tokens, prompt_len, total_len)
    assert torch.equal(a, b), (a, b)


def main() -> int:
    rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    for _ in range(cases):
        check_mask(rng)
        check_track(rng)
    print(f"ok {cases}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
