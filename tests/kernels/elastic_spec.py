"""A per-request Python model of the Elastic Reasoning spec (docs/specs.md §1).

Deliberately written from the spec, not from the ops: the fuzz tests compare every
row the adapters produce against it.
"""

from __future__ import annotations

import torch

from kernels.elastic.args import ElasticArgs


def expected_forced(args: ElasticArgs | None, out: list[int]) -> int | None:
    """The token the next step must be, given the tokens generated so far; None if free.

    The closing ``</think>`` may be a sequence: thinking ends after its first complete
    occurrence; once ``t`` is spent, the next token of the sequence is forced, after
    the longest prefix of it the output already ends with (naive search on purpose).
    """
    if args is None:
        return None
    seq = list(args.think_end_ids)
    thinking = args.thinking_open
    used = len(out)
    if thinking:
        for end in range(len(seq), len(out) + 1):
            if out[end - len(seq) : end] == seq:
                thinking = False
                used = len(out) - end
                break
    if thinking:
        if used < args.thinking_budget:
            return None
        k = max(k for k in range(len(seq)) if k == 0 or out[len(out) - k :] == seq[:k])
        return seq[k]
    if args.solution_budget is not None and used >= args.solution_budget:
        return args.eos_id
    return None


def check_row(before: torch.Tensor, after: torch.Tensor, forced: int | None) -> None:
    """A free row is bit-identical; a forced row is -inf except 0.0 at the forced id."""
    if forced is None:
        assert torch.equal(before.view(torch.int32), after.view(torch.int32)), "free row changed"
        return
    expect = torch.full_like(before, float("-inf"))
    expect[forced] = 0.0
    assert torch.equal(after, expect), f"row not forced to {forced}"
