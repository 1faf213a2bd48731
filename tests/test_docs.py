"""The README and the docs site match the code: the README stays a front page, the docs
build with every link and page in place, every setting, budget header and installed
strategy is documented (docs drift is a defect like any other)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from core.registry import GROUP
from server.pipeline.budgets import HEADERS, STRATEGY_HEADER
from server.settings_doc import settings_page

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def test_quick_start_is_the_two_scripts() -> None:
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    first_block = quick.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["bash scripts/serve.sh", "bash scripts/test.sh"]


def test_the_readme_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 250


def test_the_readmes_links_lead_somewhere() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local, "the README points at the docs"
    assert [link for link in local if not (ROOT / link).exists()] == []
    # every page of the site is reachable from the README's table or the site's index
    index = (DOCS / "index.md").read_text()
    pages = {p.name for p in DOCS.glob("*.md")}
    named = {Path(link).name for link in local} | set(re.findall(r"\]\(([a-z0-9-]+\.md)", index))
    assert pages - named - {"index.md"} == set()


def test_the_settings_page_is_generated_from_the_settings_model() -> None:
    assert (DOCS / "settings.md").read_text() == settings_page(), (
        "docs/settings.md is stale: python -m server.settings_doc > docs/settings.md"
    )


def test_wire_protocol_names() -> None:
    page = (DOCS / "wire-protocol.md").read_text()
    for header in (*HEADERS.values(), STRATEGY_HEADER, "X-Budget-Applied", "X-Request-Id"):
        assert header in page
    assert ": thinkgate.progress" in page


def test_every_installed_strategy_has_a_line() -> None:
    page = (DOCS / "strategies.md").read_text()
    documented = set(re.findall(r"^- `([a-z0-9-]+)`:", page, flags=re.M))
    installed = {ep.name for ep in entry_points(group=GROUP)}
    assert installed - documented == set()


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    """A broken link or anchor, or a page left out of the navigation, fails the build."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists() and shutil.which("mkdocs") is None:
        pytest.fail("mkdocs is a dev dependency: bash scripts/setup.sh installs it")
    cmd = [str(mkdocs) if mkdocs.exists() else "mkdocs", "build", "--strict"]
    out = subprocess.run(
        [*cmd, "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "site" / "settings" / "index.html").exists()
    assert (tmp_path / "site" / "results" / "budgets" / "budgets.png").exists()
