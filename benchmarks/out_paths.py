"""Where a benchmark writes: its ``--out`` prefix plus each file's suffix."""

from __future__ import annotations

from pathlib import Path


def beside(prefix: Path, suffix: str) -> Path:
    """``prefix`` + ``suffix``: a prefix may hold a dot (``search-temperature-0.5``),
    which ``Path.with_suffix`` would replace."""
    return prefix.with_name(prefix.name + suffix)
