"""Answers of JSON responses (``response_format``): a canonical JSON value to vote on.

A JSON answer is compared as a value, not as text: key order and spacing do not split
a vote, and nothing is read as mathematics (``strategies.answers.equivalent`` would call
``{"a": 1}`` and ``{"a": 1.0}`` the same, or worse). With ``answer_field`` the vote is
on one top-level field of the object (``{"answer": 7, "why": ...}`` votes on ``7``).
"""

from __future__ import annotations

import json
from typing import Final

from core import options
from core.base import StrategyRequest
from core.errors import InvalidRequest

ANSWER_FIELD: Final = "answer_field"


def answer_field(request: StrategyRequest) -> str | None:
    """Body option ``answer_field``: the top-level field to vote on (JSON answers only)."""
    name = options.text(request.options, ANSWER_FIELD, "")
    if not name:
        return None
    if request.sampling.structured is None:
        raise InvalidRequest(
            "answer_field names a field of a JSON answer; send it with response_format",
            param=ANSWER_FIELD,
        )
    return name


def json_answer(text: str, field: str | None = None) -> str | None:
    """The canonical JSON of ``text`` (or of its top-level ``field``); None when the
    text is not JSON (an answer cut by its budget) or has no such field."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if field is not None:
        if not isinstance(value, dict) or field not in value:
            return None
        value = value[field]
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
