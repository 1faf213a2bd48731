"""Alias of ``core.errors`` (moved there, issue 35), kept while strategies/prm.py and
strategies/step_search.py, which others are editing now, still import this path.
Remove once they import ``core.errors``."""

from core.errors import *  # noqa: F403
