"""Per-slot state of the confidence early-stop op, shared by both vLLM adapters.

Host-written columns live in an int32 :class:`~kernels.row_state.RowState` (the
threshold as its float32 bits, so one table carries every request argument). What the
op itself updates each step is device-owned: START (the first generated index this slot
has seen since it was added; -1 until its first step), the ring of the last
``MAX_WINDOW`` token confidences, indexed by generated position modulo the window, and
their running sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

import numpy as np
import torch

from kernels.confidence.args import MAX_WINDOW, ConfidenceArgs
from kernels.row_state import RowState


class ConfCol(IntEnum):
    ACTIVE = 0
    WINDOW = 1
    TOP_K = 2
    EOS_ID = 3
    THRESHOLD = 4  # float32 bits
    START = 5  # device-owned; -1: not seen yet (set at its first step)
    GEN = 6  # V1 only: tokens generated before this step (written by the host)


DEFAULTS: Final = (0, 1, 1, 0, 0, -1, 0)


def float_bits(x: float) -> int:
    """``x`` as float32, its bits read as an int32 (how THRESHOLD is stored)."""
    return int(np.array([x], dtype=np.float32).view(np.int32)[0])


def row_values(args: ConfidenceArgs) -> list[int]:
    return [1, args.window, args.top_k, args.eos_id, float_bits(args.threshold), -1, 0]


@dataclass(slots=True)
class ConfidenceState:
    """The table plus the device-owned ring and sums of ``capacity`` slots."""

    table: RowState
    ring: torch.Tensor  # [capacity, MAX_WINDOW] float32
    sums: torch.Tensor  # [capacity] float64: drift-free enough over long traces

    def reset_slot(self, slot: int) -> None:
        """A new request in ``slot``: an empty window (device ops, no sync)."""
        self.ring[slot].zero_()
        self.sums[slot] = 0.0

    def clear(self, row: int) -> None:
        self.table.clear(row)

    def move(self, src: int, dst: int) -> None:
        self.table.move(src, dst)
        self.ring[dst] = self.ring[src]
        self.sums[dst] = self.sums[src]

    def swap(self, a: int, b: int) -> None:
        self.table.swap(a, b)
        idx = torch.tensor([a, b], device=self.ring.device)
        self.ring[idx] = self.ring[idx.flip(0)]
        self.sums[idx] = self.sums[idx.flip(0)]


def new_state(capacity: int, device: torch.device, *, pin_memory: bool = False) -> ConfidenceState:
    table = RowState(DEFAULTS, capacity, device, pin_memory=pin_memory, active_col=ConfCol.ACTIVE)
    return ConfidenceState(
        table=table,
        ring=torch.zeros((capacity, MAX_WINDOW), dtype=torch.float32, device=device),
        sums=torch.zeros((capacity,), dtype=torch.float64, device=device),
    )
