"""Alias of ``core.base`` (moved there, issue 35), kept while strategies/prm.py and
strategies/step_search.py, which others are editing now, still import this path.
Remove once they import ``core.base``."""

from core.base import *  # noqa: F403
