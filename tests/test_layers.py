"""The layers import downward only (docs/architecture.md).

    server  ->  strategies, engines  ->  kernels  ->  core

* ``core``: the shared contract (errors, the Engine protocol, strategy base, budget,
  registry, defaults, reasoning formats, token confidence); imports nothing of ours.
* ``kernels``: the vLLM logits processors and their pure parts; core only.
* ``engines``: local (vLLM in process) and remote (vLLM over HTTP); core and kernels.
* ``strategies``: test-time-scaling strategies; core and kernels. A strategy reaches an
  engine only through ``core.engine.Engine``, never by importing ``engines``.
* ``server``: the gateway; may import any layer above, never ``benchmarks`` or ``testbed``
  (the testbed reaches the runtime only as an entry point, ``thinkgate.defaults``).

Inside ``server`` and ``strategies`` the folders are rooms on floors (``SERVER_FLOORS``,
``STRATEGY_FLOORS``): a module imports its own room and the floors below, never a room
above or beside it on its own floor.

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
    "server": {"core", "kernels", "engines", "strategies", "clients"},
}
# Lowest floor first. A room is a folder, or a module directly in the package; rooms on
# one floor do not import each other.
SERVER_FLOORS: tuple[tuple[str, ...], ...] = (
    ("settings_values",),
    ("settings_http",),
    ("settings", "presets"),
    ("settings_doc", "process"),
    ("tenancy", "apis"),
    ("errors",),
    ("batches",),
    ("resources", "calibrate"),
    ("gateway",),
    ("pipeline",),
    ("routes",),
    ("app",),
    ("cli",),
)
# The shared kit (every module directly in ``strategies/``, ``plain`` and ``auto``
# included) is the ground floor; the families build on it.
STRATEGY_FLOORS: tuple[tuple[str, ...], ...] = (
    ("",),
    ("sampling", "thinking", "pets"),
    ("search",),
    ("tree",),
)
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


def room(path: Path, layer: str) -> str:
    """The room of a module of ``layer``: its folder, or its own name when it sits in the
    layer's top folder ("" for every top module of ``strategies``, the shared kit)."""
    parts = path.relative_to(ROOT / layer).parts
    if len(parts) > 1:
        return parts[0]
    return "" if layer == "strategies" else parts[0].removesuffix(".py")


def room_of_import(name: str, layer: str) -> str | None:
    """The room an absolute import of ``layer``'s own code lands in (None for the package
    itself)."""
    parts = name.split(".")
    if parts[0] != layer or len(parts) < 2:
        return None
    if (ROOT / layer / parts[1]).is_dir():
        return parts[1]
    return "" if layer == "strategies" else parts[1]


def room_imports(layer: str) -> list[tuple[str, str, str]]:
    """(module path, its room, imported room) for every import between rooms of ``layer``."""
    out = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        own = room(path, layer)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                dep = room_of_import(name, layer)
                if dep is not None and dep != own:
                    out.append((path.relative_to(ROOT).as_posix(), own, dep))
    return out


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


@pytest.mark.parametrize(
    ("layer", "floors"), [("server", SERVER_FLOORS), ("strategies", STRATEGY_FLOORS)]
)
def test_rooms_import_only_lower_floors(layer: str, floors: tuple[tuple[str, ...], ...]) -> None:
    floor = {name: level for level, rooms in enumerate(floors) for name in rooms}
    present = {room(path, layer) for path in (ROOT / layer).rglob("*.py")} - {"__init__"}
    assert present <= set(floor), (
        f"rooms of {layer} missing from the floors: {present - set(floor)}"
    )
    bad = sorted(
        f"{rel} ({own}) imports {dep}"
        for rel, own, dep in room_imports(layer)
        if own != "__init__" and floor[dep] >= floor[own]
    )
    assert not bad, f"{layer}: an import goes up or sideways:\n" + "\n".join(bad)


@pytest.mark.parametrize("outside", ["benchmarks", "testbed"])
def test_the_runtime_imports_neither_benchmarks_nor_the_testbed(outside: str) -> None:
    for layer in ("core", "kernels", "engines", "strategies", "server"):
        found = [rel for lay, rel, dep in edges() if lay == layer and dep == outside]
        assert not found, f"{outside} imported by the runtime: {found}"
