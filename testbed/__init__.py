"""The tiny reasoning-model family thinkgate trains itself."""

from __future__ import annotations

from pathlib import Path
from typing import Final

MODELS_DIR: Final = Path(__file__).resolve().parent / "models"
MODEL_NAMES: Final = ("base", "elastic", "tools", "reward", "prm")


def model_path(name: str) -> Path:
    """Directory of a shipped model (`base`, `elastic`, `tools`, `reward` or `prm`)."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown testbed model {name!r}; expected one of {MODEL_NAMES}")
    return MODELS_DIR / name


def portable_path(path: Path) -> Path:
    """`path` relative to the working directory when inside it, so that cards and configs
    written on one machine name no directory of that machine."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path
