"""The layers import downward only (docs/architecture.md).

    server  ->  strategies, engines  ->  kernels  ->  core

* ``core``: the shared contract (errors, the Engine protocol, strategy base, budget,
  registry, defaults, reasoning formats, token confidence); imports nothing of ours.
* ``kernels``: the vLLM logits processors and their pure parts; core only.
* ``engines``: local (vLLM in process) and remote (vLLM over HTTP); core and kernels.
* ``strategies``: test-time-scaling strategies; core and kernels. A strategy reaches an
  engine only through ``core.engine.Engine``, never by importing ``engines``.
* ``server``: the gateway; may import anything.

Every import counts, lazy ones inside functions and ``TYPE_CHECKING`` ones included: the
walk reads the source (ast), so it sees what an import-time check would miss.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"core", "kernels", "engines", "strategies", "server", "testbed", "benchmarks", "clients"}
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "kernels": {"core"},
    "engines": {"core", "kernels"},
    "strategies": {"core", "kernels"},
    "server": OURS,
}
# Imports that break the rule today, each with why; remove an entry when it is fixed.
KNOWN: set[tuple[str, str]] = set()


def imports_of(path: Path) -> set[str]:
    """The top-level packages of ours that ``path`` imports (absolute imports only: a
    relative import stays inside its own package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(top for name in names if (top := name.split(".")[0]) in OURS)
    return found


def edges() -> list[tuple[str, str, str]]:
    """(layer, module path, imported package) for every import across layers."""
    out = []
    for layer in ALLOWED:
        for path in sorted((ROOT / layer).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            out.extend((layer, rel, dep) for dep in imports_of(path) if dep != layer)
    return out


def test_every_layer_exists() -> None:
    for layer in ALLOWED:
        assert (ROOT / layer / "__init__.py").is_file(), layer


def test_imports_go_down_the_layers() -> None:
    bad = [
        f"{rel} imports {dep}"
        for layer, rel, dep in edges()
        if dep not in ALLOWED[layer] and (rel, dep) not in KNOWN
    ]
    assert not bad, "layer rule broken (docs/architecture.md):\n" + "\n".join(bad)


def test_known_exceptions_still_exist() -> None:
    """A fixed exception leaves the list, so the rule cannot silently stay weaker."""
    present = {(rel, dep) for _, rel, dep in edges()}
    assert present >= KNOWN, KNOWN - present


@pytest.mark.parametrize(
    "source",
    [
        "import server.app\n",
        "from server.settings import Settings\n",
        "def f():\n    from engines.local import engine\n",
    ],
)
def test_the_walk_sees_every_import_form(tmp_path: Path, source: str) -> None:
    path = tmp_path / "m.py"
    path.write_text(source)
    assert imports_of(path) & {"server", "engines"}
