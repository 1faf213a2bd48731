"""The output limit of a request that sets none (``max_tokens``, ``max_completion_tokens``,
``max_output_tokens``): without one a sample may run to the end of the context, which on
a 65,536-token context is minutes of a model that does not stop (a small model offered
tools). Resolved once at start-up, first found wins:

1. the server's ``--default-max-tokens``;
2. the model's own ``generation_config.json`` ``max_new_tokens`` (a local directory);
3. what the installed defaults offer for the default model (``max_tokens``: the testbed's);
4. none: the rest of the context, vLLM's own rule.
"""

from __future__ import annotations

import json
from pathlib import Path

from core import defaults
from server.settings import Settings


def default_max_tokens(settings: Settings) -> int | None:
    """The ``max_tokens`` a request that sets none gets (None: the rest of the context)."""
    if settings.default_max_tokens is not None:
        return settings.default_max_tokens
    own = _generation_config(settings.model_path)
    if own is not None:
        return own
    try:
        offered = defaults.installed()
    except defaults.NoDefaultModel:
        return None
    if offered.max_tokens is not None and offered.is_default_model(settings.model_path):
        return offered.max_tokens
    return None


def _generation_config(model: str) -> int | None:
    """``max_new_tokens`` of a local model directory's generation config, if it has one."""
    path = Path(model) / "generation_config.json"
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text()).get("max_new_tokens")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
