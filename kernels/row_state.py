"""Per-row state of a batched logits op: an int32 table of columns x slots.

A processor keeps one :class:`RowState` sized to the engine's ``max_num_seqs``. The
host copy (pinned when the device is a GPU) is the source of truth for what the host
writes; :meth:`RowState.flush` ships the rows written since the last flush to the
device in one copy. Columns are defined by the op (an ``IntEnum`` per op, e.g.
``ElasticCol``), so a second op (budget guidance) reuses the bookkeeping with its own
columns. Ops take ``RowState.device`` (``[num_cols, capacity]``, each column a
contiguous ``[capacity]`` row) plus an optional row -> slot mapping.

Some columns may be owned by the device (a kernel updates them in place, as the
Model Runner V2 tracking does). That is why a flush copies only the written rows and
never the whole table: a whole-table copy would overwrite device-side updates of
other rows with stale host values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

# A full row of column values: a list from the host, or a column slice of the table.
RowValues = Sequence[int] | np.ndarray


class RowState:
    """A ``[num_cols, capacity]`` int32 table with row writes, moves and swaps.

    Writes, moves and clears happen on the host and must be followed by
    :meth:`flush` before an op reads ``device`` (once per step, before the op).
    ``active_count`` counts the rows whose ``active_col`` is non-zero, so a processor
    can return early without looking at the device.
    """

    def __init__(
        self,
        defaults: Sequence[int],
        capacity: int,
        device: torch.device,
        *,
        pin_memory: bool = False,
        active_col: int = 0,
    ) -> None:
        self.num_cols = len(defaults)
        self.capacity = capacity
        self.active_col = active_col
        self._defaults = np.asarray(defaults, dtype=np.int32)
        on_cpu = torch.device(device).type == "cpu"
        self.host = torch.empty(
            (self.num_cols, capacity), dtype=torch.int32, pin_memory=pin_memory and not on_cpu
        )
        self.host_np: np.ndarray = self.host.numpy()
        self.host_np[:] = self._defaults[:, None]
        # On CPU the op reads the host table directly: nothing to copy.
        self.device = self.host if on_cpu else self.host.to(device)
        self._dirty: set[int] = set()
        self.active_count = 0

    def write(self, row: int, values: RowValues) -> None:
        """Set every column of ``row`` (a new request in that slot)."""
        was = bool(self.host_np[self.active_col, row])
        self.host_np[:, row] = values
        self.active_count += int(bool(self.host_np[self.active_col, row])) - int(was)
        self._dirty.add(row)

    def clear(self, row: int) -> None:
        """Reset ``row`` to the defaults (inactive)."""
        self.write(row, self._defaults)

    def move(self, src: int, dst: int) -> None:
        """Move ``src`` to ``dst`` (whatever ``dst`` held is dropped); ``src`` is cleared."""
        if src == dst:
            return
        self.write(dst, self.host_np[:, src].copy())
        self.clear(src)

    def swap(self, a: int, b: int) -> None:
        """Exchange rows ``a`` and ``b``."""
        if a == b:
            return
        self.host_np[:, [a, b]] = self.host_np[:, [b, a]]
        self._dirty.update((a, b))

    def set_column(self, col: int, rows: Sequence[int], values: Sequence[int]) -> None:
        """Write one column for several rows (per-step host bookkeeping)."""
        if not rows:
            return
        self.host_np[col, rows] = values
        self._dirty.update(rows)

    def is_active(self, row: int) -> bool:
        return bool(self.host_np[self.active_col, row])

    def flush(self) -> None:
        """Copy the rows written since the last flush to ``device``; no host sync.

        The copy reads a fresh pinned staging tensor, so later host writes cannot
        race with a copy still in flight.
        """
        if not self._dirty:
            return
        if self.device is not self.host:
            rows = sorted(self._dirty)
            idx = torch.tensor(rows, dtype=torch.int64, pin_memory=True)
            vals = self.host[:, idx].pin_memory()
            dev_idx = idx.to(self.device, non_blocking=True)
            self.device.index_copy_(1, dev_idx, vals.to(self.device, non_blocking=True))
        self._dirty.clear()
