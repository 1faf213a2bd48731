"""The README matches the code: every setting, budget header and installed strategy is
documented (docs drift is a defect like any other)."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path

from core.registry import GROUP
from server.budgets import HEADERS, STRATEGY_HEADER
from server.settings import Settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_quick_start_is_the_two_scripts() -> None:
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    first_block = quick.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert commands == ["bash scripts/serve.sh", "bash scripts/test.sh"]


def settings_row(name: str) -> str:
    """The README table row of a setting (its field docstring is the meaning)."""
    field = Settings.model_fields[name]
    default = field.default
    if isinstance(default, tuple):
        default = ",".join(default)
    shown = "" if default is None or default == "" else f"`{default}`"
    meaning = " ".join((field.description or "").split()).replace("``", "`")
    return f"| `--{name.replace('_', '-')}` | {shown} | {meaning} |"


def test_every_setting_is_in_the_table() -> None:
    table = README.split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(--[a-z0-9-]+)` \|", table, flags=re.M))
    names = {"--" + name.replace("_", "-"): name for name in Settings.model_fields}
    missing = [settings_row(names[flag]) for flag in sorted(set(names) - rows)]
    assert not missing, "settings missing from the README table; add:\n" + "\n".join(missing)
    assert rows - set(names) == set(), "README documents settings that do not exist"
    stale = [settings_row(n) for n in Settings.model_fields if settings_row(n) not in table]
    assert not stale, "README rows out of date (default or meaning); replace with:\n" + "\n".join(
        stale
    )


def test_wire_protocol_names() -> None:
    for header in (*HEADERS.values(), STRATEGY_HEADER, "X-Budget-Applied", "X-Request-Id"):
        assert header in README
    assert ": thinkgate.progress" in README


def test_every_installed_strategy_has_a_line() -> None:
    section = README.split("## Strategies", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^- `([a-z0-9-]+)`:", section, flags=re.M))
    installed = {ep.name for ep in entry_points(group=GROUP)}
    assert installed - documented == set()
