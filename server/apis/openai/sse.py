"""Server-sent events exactly as the OpenAI SDK reads them.

``data: {json}\\n\\n`` per chunk, ``data: [DONE]\\n\\n`` at the end. Progress of
multi-sample strategies travels as comment lines (``: thinkgate.progress {json}``),
which SSE clients (the OpenAI SDK included) skip. orjson never writes a newline, so
one JSON value is always one line.
"""

from __future__ import annotations

from typing import Final

import orjson

DONE: Final = b"data: [DONE]\n\n"
PROGRESS: Final = b"thinkgate.progress"
KEEPALIVE: Final = b": keep-alive\n\n"  # a comment: SSE clients skip it


def data(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def comment(name: bytes, obj: object) -> bytes:
    return b": " + name + b" " + orjson.dumps(obj) + b"\n\n"


def event(name: str, obj: object) -> bytes:
    """A named event (``event: name``), as the Responses and Anthropic streams send them."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"
