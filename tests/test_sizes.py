"""Runtime modules stay small enough to read: every file of the runtime packages under
500 lines and every function under 80 (docs/architecture.md). A piece that grows past
either is split along its seams, each part named by what it does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ("core", "kernels", "engines", "strategies", "server")
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(p for layer in RUNTIME for p in (ROOT / layer).rglob("*.py"))


def test_the_walk_sees_the_runtime() -> None:
    assert len(_modules()) > 150


@pytest.mark.parametrize("layer", RUNTIME)
def test_runtime_files_stay_under_500_lines(layer: str) -> None:
    long = {
        p.relative_to(ROOT).as_posix(): n
        for p in (ROOT / layer).rglob("*.py")
        if (n := p.read_text().count("\n")) >= MAX_FILE_LINES
    }
    assert not long, long


@pytest.mark.parametrize("layer", RUNTIME)
def test_runtime_functions_stay_under_80_lines(layer: str) -> None:
    long = {}
    for path in (ROOT / layer).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines >= MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {node.name}"] = lines
    assert not long, long
