"""Import hygiene: ``kernels`` is ours (HF's PyPI ``kernels`` shares the name), the
layers import one way, and the HTTP layer does not need torch or vLLM."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_kernels_is_ours_and_transformers_does_not_see_hf_kernels() -> None:
    from transformers.utils import is_kernels_available  # type: ignore[attr-defined]

    import kernels

    assert Path(kernels.__file__).resolve().parent == ROOT / "kernels"
    assert is_kernels_available() is False


def _imported_roots(package: str) -> set[str]:
    roots: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                roots |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots.add(node.module.split(".")[0])
    return roots


def test_imports_point_one_way() -> None:
    assert not _imported_roots("kernels") & {"strategies", "server"}
    assert "server" not in _imported_roots("strategies")
    assert not _imported_roots("clients") & {"kernels", "strategies", "server", "testbed"}


def test_the_runtime_does_not_import_the_testbed() -> None:
    # The testbed offers itself as the default model (entry point thinkgate.defaults).
    for runtime in ("server", "engines", "strategies", "kernels", "core"):
        assert "testbed" not in _imported_roots(runtime), runtime


def test_http_layer_imports_without_torch_or_vllm() -> None:
    code = (
        "import sys\n"
        "import server.app, server.cli, server.pipeline.serving, engines, server.routes\n"
        "heavy = sorted(m for m in ('torch', 'vllm') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "", f"the HTTP layer pulled in {out.stdout.strip()}"


def test_strategy_modules_do_not_import_each_other() -> None:
    """Registered strategies share building blocks (pool, elastic_plan, voting ...), never
    each other's modules."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    modules = {v.split(":")[0] for v in project["entry-points"]["thinkgate.strategies"].values()}
    assert "strategies.plain" in modules and len(modules) >= 8
    for module in modules:
        path = ROOT / (module.replace(".", "/") + ".py")
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
                imported |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
        assert not (imported & (modules - {module})), (module, imported & modules)
