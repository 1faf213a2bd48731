"""A per-request Python model of the Elastic Reasoning spec (ALGORITHMS.md section 1).

Deliberately written from the spec, not from the ops: the fuzz tests compare every
row the adapters produce against it.
"""

from __future__ import annotations

import torch

from kernels.args import ElasticArgs


def expected_forced(args: ElasticArgs | None, out: list[int]) -> int | None:
    """The token the next step must be, given the tokens generated so far; None if free."""
    if args is None:
        return None
    thinking = args.thinking_open
    used = len(out)
    if thinking and args.think_end_id in out:
        thinking = False
        used = len(out) - out.index(args.think_end_id) - 1
    if thinking:
        return args.think_end_id if used >= args.thinking_budget else None
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
