"""Row-state columns of budget guidance, shared by both vLLM adapters.

The table is a :class:`kernels.row_state.RowState` (the bookkeeping the Elastic
Reasoning processors use), one column per fact below, one slot per request row.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final

import torch

from kernels.guidance.args import GuidanceArgs
from kernels.row_state import RowState


class GuidanceCol(IntEnum):
    """int32 columns. ACTIVE..CLOSED are written on add; the rest per step.

    CLOSED is 1 once the row has left thinking (``</think>`` generated, or the prompt
    did not open thinking). The V1 adapter writes CLOSED, USED and BOUNDARY on the host
    from the live output lists; the V2 adapter updates CLOSED on the device and derives
    the others from the step context, so USED and BOUNDARY are unused there.
    """

    ACTIVE = 0
    BUDGET = 1  # B > 0
    MASK = 2  # reliability mask on (1) or off (0)
    CLOSED = 3
    USED = 4  # thinking tokens generated so far
    BOUNDARY = 5  # the next token starts a line (first step, or after a newline token)
    ALL_STEPS = 6  # guide every thinking step (overhead benchmark's worst case)


DEFAULTS: Final = (0, 0, 1, 1, 0, 0, 0)
assert len(DEFAULTS) == len(GuidanceCol)


def row_values(args: GuidanceArgs) -> list[int]:
    """The full column row of a guided request entering the batch (nothing generated)."""
    return [1, args.budget, int(args.mask), int(not args.thinking_open), 0, 1, int(args.all_steps)]


def new_state(capacity: int, device: torch.device, *, pin_memory: bool = False) -> RowState:
    """A row state for ``capacity`` slots, every slot unguided."""
    return RowState(
        DEFAULTS, capacity, device, pin_memory=pin_memory, active_col=GuidanceCol.ACTIVE
    )
