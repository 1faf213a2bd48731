"""Anthropic's error envelope, which every error of ``/v1/messages`` answers with.

``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``; the
error type follows the HTTP status as Anthropic's API types its own errors (our 503 is
its ``overloaded_error``). The status code, ``X-Request-Id`` and ``Retry-After`` are the
ones every route sends (``server.errors``).
"""

from __future__ import annotations

from typing import Final

from core.errors import GatewayError

PATH: Final = "/v1/messages"

_TYPES: Final[dict[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status (``api_error`` for other 5xx)."""
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def envelope(err: GatewayError, request_id: str) -> dict[str, object]:
    """The body of ``err`` on ``/v1/messages`` (and of a stream's ``error`` event)."""
    return {
        "type": "error",
        "error": {"type": error_type(err.status), "message": err.message},
        "request_id": request_id,
    }
