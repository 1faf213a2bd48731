"""Columns of the Elastic Reasoning row state, shared by both vLLM adapters."""

from __future__ import annotations

from enum import IntEnum
from typing import Final

import torch

from kernels.elastic.args import MAX_THINK_END_TOKENS, ElasticArgs
from kernels.row_state import RowState

THINKING: Final = 0  # inside <think>: counting toward t
ANSWER: Final = 1  # after </think> (or never opened): counting toward s
UNLIMITED: Final = -1  # SOLUTION_BUDGET value for "no solution budget"


class ElasticCol(IntEnum):
    """Row-state columns (int32). The mask op reads ACTIVE..EOS_ID, and END_LEN, MATCHED
    and the END_TAIL columns for a closing sequence of several tokens.

    PHASE and USED are written every step by whoever tracks tokens: the V1 adapter
    on the host from the live output lists, the V2 tracking op on the device.
    THINK_END_POS and SCAN_POS belong to the V2 tracking op only.
    """

    ACTIVE = 0
    PHASE = 1
    USED = 2  # tokens generated in the current phase
    THINK_BUDGET = 3
    SOLUTION_BUDGET = 4  # UNLIMITED or >= 0
    THINK_END_ID = 5  # the first token of the closing sequence
    EOS_ID = 6
    THINKING_OPEN = 7
    THINK_END_POS = 8  # sequence position of the first generated </think>, -1 if none
    SCAN_POS = 9  # next sequence position to scan for </think> (0: from prompt end)
    # A closing sequence of END_LEN > 1 tokens (one-token rows leave these at rest, so
    # the Triton kernels, which read only THINK_END_ID, stay exact for them):
    END_LEN = 10
    MATCHED = 11  # how many of its tokens the output ends with now, while thinking
    END_TAIL = 12  # first of MAX_THINK_END_TOKENS - 1 columns: tokens 1.. of the sequence
    # After the tail: thinking tokens before the end of thinking may come (0: none held
    # back). A deadline that passes sets it and THINK_BUDGET to 0 (the end is forced).
    THINK_MIN = 12 + MAX_THINK_END_TOKENS - 1


NUM_COLS: Final = ElasticCol.THINK_MIN + 1
DEFAULTS: Final = (
    (0, THINKING, 0, 0, UNLIMITED, 0, 0, 1, -1, 0, 1, 0) + (0,) * (MAX_THINK_END_TOKENS - 1) + (0,)
)
assert len(DEFAULTS) == NUM_COLS


def end_token_col(k: int) -> int:
    """The column of token ``k`` of the closing sequence."""
    return ElasticCol.THINK_END_ID if k == 0 else ElasticCol.END_TAIL + k - 1


def row_values(args: ElasticArgs) -> list[int]:
    """The full column row of a request entering the batch (nothing generated yet)."""
    tail = list(args.think_end_ids[1:])
    return [
        1,
        THINKING if args.thinking_open else ANSWER,
        0,
        args.thinking_budget,
        UNLIMITED if args.solution_budget is None else args.solution_budget,
        args.think_end_id,
        args.eos_id,
        int(args.thinking_open),
        -1,
        0,
        len(args.think_end_ids),
        0,
        *tail,
        *[0] * (MAX_THINK_END_TOKENS - 1 - len(tail)),
        args.thinking_min,
    ]


def new_state(capacity: int, device: torch.device, *, pin_memory: bool = False) -> RowState:
    """A row state for ``capacity`` slots, every slot inactive."""
    return RowState(DEFAULTS, capacity, device, pin_memory=pin_memory, active_col=ElasticCol.ACTIVE)
