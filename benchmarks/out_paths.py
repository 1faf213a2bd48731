"""Where a benchmark writes: ``benchmarks/results/<module>/`` for its results, the shared
``benchmarks/results/logs/`` for its servers' logs, and its ``--out`` prefix plus each
file's suffix."""

from __future__ import annotations

from pathlib import Path

RESULTS_ROOT = Path(__file__).resolve().parent / "results"
# Server logs stay in one folder for every benchmark: git ignores it, the docs skip it.
LOGS = RESULTS_ROOT / "logs"


def results_of(module: str) -> Path:
    """The folder of one benchmark module's results (``tree`` -> ``results/tree``): every
    run of it writes there, a rerun beside the runs it repeats."""
    return RESULTS_ROOT / module


def beside(prefix: Path, suffix: str) -> Path:
    """``prefix`` + ``suffix``: a prefix may hold a dot (``temperature-0.5``),
    which ``Path.with_suffix`` would replace. Its folder is made if it is missing: a
    benchmark writes its files at the end, and an ``--out`` in a folder not yet made
    would lose a whole run to a ``FileNotFoundError`` there."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    return prefix.with_name(prefix.name + suffix)
