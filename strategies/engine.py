"""Alias of ``core.engine`` (moved there, issue 35), kept while strategies/prm.py and
strategies/step_search.py, which others are editing now, still import this path.
Remove once they import ``core.engine``."""

from core.engine import *  # noqa: F403
