"""The host side of a V1 batch move, shared by our V1 adapters.

vLLM's V1 runner reports moves as ``(src, dst, direction)``: a SWAP exchanges two rows,
a unidirectional move puts ``src`` in ``dst`` (whatever ``dst`` held is gone) and frees
``src``. Each adapter moves its device/row-state table itself; the per-row host objects
it keeps in a dict (live output lists, trackers) move the same way here, as vLLM's own
``process_dict_updates`` does for its built-in processors.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def move_row(rows: dict[int, T], src: int, dst: int, *, swap: bool) -> None:
    """Apply one move to ``rows`` (row -> host object; absent: the row is not ours)."""
    a, b = rows.pop(src, None), rows.pop(dst, None)
    if a is not None:
        rows[dst] = a
    if swap and b is not None:
        rows[src] = b
