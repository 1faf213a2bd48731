"""Optional API keys: ``Authorization: Bearer <key>`` on /v1/* when keys are configured."""

from __future__ import annotations

import hmac

from starlette.requests import HTTPConnection

from core.errors import Unauthorized
from server.settings import Settings


def authorize(conn: HTTPConnection, settings: Settings) -> None:
    """Raise ``Unauthorized`` unless no keys are configured or the bearer key is one."""
    if not settings.api_keys:
        return
    scheme, _, key = conn.headers.get("authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    # Compare against every key in constant time, so timing does not reveal a prefix.
    ok = False
    for allowed in settings.api_keys:
        ok |= hmac.compare_digest(key.encode(), allowed.encode())
    if not ok:
        raise Unauthorized("invalid API key")


def api_key(conn: HTTPConnection, settings: Settings) -> str | None:
    """The request's API key once ``authorize`` passed it (None: no keys configured)."""
    if not settings.api_keys:
        return None
    return conn.headers.get("authorization", "").partition(" ")[2].strip()
