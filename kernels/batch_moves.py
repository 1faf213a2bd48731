"""A V1 batch update applied to an adapter's row table and host objects, shared by our
V1 adapters (each keeps only what a new row means to it: ``admit``).

vLLM's V1 runner reports moves as ``(src, dst, direction)``: a SWAP exchanges two rows,
a unidirectional move puts ``src`` in ``dst`` (whatever ``dst`` held is gone) and frees
``src``. Each adapter moves its device/row-state table itself; the per-row host objects
it keeps in a dict (live output lists, trackers) move the same way here, as vLLM's own
``process_dict_updates`` does for its built-in processors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

T = TypeVar("T")


class RowTable(Protocol):
    """The per-row device state an adapter keeps (``kernels.row_state.RowState`` ...)."""

    def clear(self, row: int) -> None: ...
    def move(self, src: int, dst: int) -> None: ...
    def swap(self, a: int, b: int) -> None: ...


class ShippedTable(RowTable, Protocol):
    """A row table with a host copy shipped to the device once per step."""

    active_count: int

    def flush(self) -> None: ...


def drop_every_row(table: ShippedTable, rows: dict[int, T]) -> None:
    """After a failure inside the engine: every row of ours cleared (its request goes on
    without the processor: unguarded output beats a dead engine), the table shipped; a
    table that cannot even ship is marked empty, so ``apply`` passes logits through."""
    for row in list(rows):
        table.clear(row)
    rows.clear()
    try:
        table.flush()
    except Exception:
        table.active_count = 0


def apply_batch_update(
    update: BatchUpdate,
    table: RowTable,
    rows: dict[int, T],
    admit: Callable[[int, SamplingParams, list[int]], T | None],
) -> None:
    """vLLM's order: removed, added, moved. A reused slot is cleared before ``admit``
    (``row, params, live output ids``) writes it; ``admit`` returns the row's host
    object, or None to leave the row to others (no args of ours, or unusable here)."""
    from vllm.v1.sample.logits_processor import MoveDirectionality

    for row in update.removed:
        if rows.pop(row, None) is not None:
            table.clear(row)
    for row, params, _prompt, out in update.added:
        rows.pop(row, None)
        table.clear(row)
        host = admit(row, params, out)
        if host is not None:
            rows[row] = host
    for src, dst, direction in update.moved:
        swap = direction == MoveDirectionality.SWAP
        (table.swap if swap else table.move)(src, dst)
        move_row(rows, src, dst, swap=swap)


def move_row(rows: dict[int, T], src: int, dst: int, *, swap: bool) -> None:
    """Apply one move to ``rows`` (row -> host object; absent: the row is not ours)."""
    a, b = rows.pop(src, None), rows.pop(dst, None)
    if a is not None:
        rows[dst] = a
    if swap and b is not None:
        rows[src] = b
