"""Resources of the step search: its defaults (``strategies.search_options``), from the
settings and the served model's defaults (the testbed thinks one step per line).

The process reward model itself is attached by its own builder (``server.resources.prm``).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

from core import defaults
from core.base import Attached
from core.engine import ServedModel
from server.settings import Settings
from strategies.search_options import DEFAULTS_KEY, SearchDefaults

# A blank line: where real reasoning models end a step, and what PRMs trained on
# PRM800K-style data (Qwen2.5-Math-PRM) split on.
GENERIC_DELIMITER = "\n\n"


def step_delimiter(settings: Settings) -> str:
    """The setting, else the default model's own delimiter when it is the one served."""
    if settings.step_delimiter:
        return settings.step_delimiter
    try:
        offered = defaults.installed()
    except defaults.NoDefaultModel:
        return GENERIC_DELIMITER
    served = Path(settings.model_path)
    if offered.step_delimiter and served.exists() and offered.is_default_model(served):
        return offered.step_delimiter
    return GENERIC_DELIMITER


async def search_resources(
    settings: Settings, served: ServedModel, stack: AsyncExitStack
) -> Attached:
    return {
        DEFAULTS_KEY: SearchDefaults(
            step_delimiter=step_delimiter(settings),
            max_steps=settings.search_max_steps,
            max_step_tokens=settings.search_max_step_tokens,
            expansions=settings.search_expansions,
            confidence=settings.search_confidence,
        )
    }
