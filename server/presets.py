"""Strategy presets as model names, for clients that can set nothing but ``model``.

A request for ``<served model>@<preset>`` (``testbed-base@auto-2s``) runs the preset's
strategy and budget, as if the body had said them; what the request sets itself (an
``X-Strategy`` or ``X-Budget-*`` header, a body ``strategy`` or ``budget`` field) still
wins, field by field. ``GET /v1/models`` lists every preset as a model of its own.

The built-in presets are below; ``--presets FILE`` replaces them with a JSON object of
``{"name": {"strategy": ..., "budget": {...}}}`` (checked at start-up: a malformed file
fails it, as an unknown strategy or budget field would fail its first request).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from core.errors import NotFound

NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SEPARATOR: Final = "@"


@dataclass(frozen=True, slots=True)
class Preset:
    strategy: str | None = None
    budget: Mapping[str, int] = field(default_factory=dict)


BUILT_IN: Final[Mapping[str, Preset]] = {
    "auto": Preset("auto"),
    "auto-1s": Preset("auto", {"deadline_ms": 1000}),
    "auto-2s": Preset("auto", {"deadline_ms": 2000}),
    "auto-4s": Preset("auto", {"deadline_ms": 4000}),
    "auto-1k": Preset("auto", {"tokens": 1000}),
    "self-consistency-8": Preset("self-consistency", {"samples": 8}),
    "deepconf-16": Preset("deepconf", {"samples": 16}),
}


def load(path: str | None) -> Mapping[str, Preset]:
    """The presets of ``path`` (None: the built-in ones)."""
    if path is None:
        return BUILT_IN
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"presets {path}: a JSON object of name -> preset")
    out: dict[str, Preset] = {}
    for name, spec in data.items():
        if not NAME.match(name) or not isinstance(spec, dict):
            raise ValueError(f"presets {path}: {name!r} is not a preset name with an object")
        unknown = set(spec) - {"strategy", "budget"}
        budget = spec.get("budget", {})
        if unknown or not isinstance(budget, dict):
            raise ValueError(f"presets {path}: {name!r} has {sorted(unknown) or 'a bad budget'}")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in budget.values()):
            raise ValueError(f"presets {path}: {name!r}'s budget values are integers")
        strategy = spec.get("strategy")
        if strategy is not None and not isinstance(strategy, str):
            raise ValueError(f"presets {path}: {name!r}'s strategy is a name")
        out[name] = Preset(strategy, dict(budget))
    return out


def resolve(model: str, served: str, presets: Mapping[str, Preset]) -> Preset | None:
    """The preset ``model`` names (None: the served model itself); a 404 naming
    ``model`` for another model or an unknown preset."""
    if model == served:
        return None
    base, sep, name = model.partition(SEPARATOR)
    if sep and base == served and name in presets:
        return presets[name]
    offered = ", ".join([served, *(f"{served}@{n}" for n in presets)])
    raise NotFound(
        f"model {model!r} is not served here; this server serves {offered}", param="model"
    )


def applied(
    preset: Preset | None, strategy: str | None, budget: Mapping[str, object] | None
) -> tuple[str | None, dict[str, object] | None]:
    """The request's ``strategy`` and ``budget`` body fields with the preset's beneath."""
    if preset is None:
        return strategy, None if budget is None else dict(budget)
    merged: dict[str, object] = {**preset.budget, **(budget or {})}
    return strategy or preset.strategy, merged or None
