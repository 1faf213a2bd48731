"""Where a benchmark writes: its ``--out`` prefix plus each file's suffix."""

from __future__ import annotations

from pathlib import Path


def beside(prefix: Path, suffix: str) -> Path:
    """``prefix`` + ``suffix``: a prefix may hold a dot (``search-temperature-0.5``),
    which ``Path.with_suffix`` would replace. Its folder is made if it is missing: a
    benchmark writes its files at the end, and an ``--out`` in a folder not yet made
    would lose a whole run to a ``FileNotFoundError`` there."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    return prefix.with_name(prefix.name + suffix)
