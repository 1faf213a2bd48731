"""vLLM's structured-outputs settings of every engine thinkgate starts (the in-process
engine and ``thinkgate replica``'s servers), so a JSON answer reads the same from both."""

from __future__ import annotations

from typing import Any, Final

GRAMMAR_CONFIG: Final[dict[str, Any]] = {
    # JSON answers (response_format) start where the reasoning parser sees thinking end.
    # Compact JSON: with whitespace allowed, small models pad an answer with newlines up
    # to max_tokens. vLLM takes that only with a named backend (not "auto").
    "backend": "xgrammar",
    "disable_any_whitespace": True,
}
"""vLLM's structured-outputs settings of every engine we start (replicas too)."""
