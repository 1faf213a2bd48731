"""An input file read line by line, as OpenAI checks it when a batch is created.

Each line is ``{"custom_id", "method": "POST", "url": <the batch's endpoint>, "body"}``.
A file with any bad line fails the batch before anything runs: its ``errors`` list each
bad line (1-based ``line``, a ``code`` as OpenAI's, the ``param``), so the client fixes
the file and submits again; nothing is half-run. What the body holds is checked when the
line runs, by the route it names, and a body that route refuses (an unknown model, a bad
field) is that line's answer in the error file, the other lines unaffected.
"""

from __future__ import annotations

from typing import Final

import orjson

from core.base import JSON
from server.batches.records import Line

MAX_LINES: Final = 50_000  # OpenAI's
MAX_ERRORS: Final = 100  # listed in a failed batch's errors; the rest are counted


def read_lines(content: bytes, endpoint: str) -> tuple[list[Line], list[dict[str, JSON]]]:
    """The file's lines, or (when any is bad) the errors that fail the batch."""
    lines: list[Line] = []
    errors: list[dict[str, JSON]] = []
    seen: set[str] = set()
    raw_lines = content.splitlines()
    numbered = [(n, raw) for n, raw in enumerate(raw_lines, start=1) if raw.strip()]
    if not numbered:
        return [], [_error("empty_file", "the input file holds no requests", None, None)]
    if len(numbered) > MAX_LINES:
        return [], [
            _error(
                "too_many_requests",
                f"the input file holds {len(numbered)} requests; a batch takes at most {MAX_LINES}",
                None,
                None,
            )
        ]
    for number, raw in numbered:
        problem = _check(raw, endpoint, seen)
        if isinstance(problem, dict):
            if len(errors) < MAX_ERRORS:
                errors.append({**problem, "line": number})
            continue
        lines.append(Line(index=len(lines), custom_id=problem[0], body=problem[1]))
    return lines, errors


def _check(
    raw: bytes, endpoint: str, seen: set[str]
) -> tuple[str, dict[str, JSON]] | dict[str, JSON]:
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _error("invalid_json_line", f"the line is not JSON: {exc}", None, None)
    if not isinstance(line, dict):
        return _error("invalid_json_line", "the line is not a JSON object", None, None)
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return _error(
            "missing_required_parameter", "custom_id must be a non-empty string", "custom_id", None
        )
    if custom_id in seen:
        return _error(
            "duplicate_custom_id",
            f"custom_id {custom_id!r} is used by an earlier line; each must be unique",
            "custom_id",
            None,
        )
    seen.add(custom_id)
    if line.get("method") != "POST":
        return _error("invalid_method", "method must be POST", "method", None)
    if line.get("url") != endpoint:
        return _error(
            "invalid_url",
            f"url is {line.get('url')!r}; this batch's endpoint is {endpoint!r}",
            "url",
            None,
        )
    body = line.get("body")
    if not isinstance(body, dict):
        return _error("missing_required_parameter", "body must be a JSON object", "body", None)
    if body.get("stream"):
        return _error(
            "invalid_request",
            "a batch's requests cannot stream; leave stream out",
            "body.stream",
            None,
        )
    return custom_id, body


def _error(code: str, message: str, param: str | None, line: int | None) -> dict[str, JSON]:
    return {"code": code, "message": message, "param": param, "line": line}
