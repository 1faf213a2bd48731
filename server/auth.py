"""Optional API keys on /v1/* and /ui when keys are configured: ``Authorization: Bearer
<key>``, or HTTP Basic with the key as the password (any user name). Basic is what a
browser can send: it asks for it when /ui answers 401 with ``WWW-Authenticate: Basic``,
and then sends it with the page's own requests to the same server."""

from __future__ import annotations

import base64
import binascii
import hmac

from starlette.requests import HTTPConnection

from core.errors import Unauthorized
from server.settings import Settings


def authorize(conn: HTTPConnection, settings: Settings) -> None:
    """Raise ``Unauthorized`` unless no keys are configured or the bearer key is one."""
    if not settings.api_keys:
        return
    key = _presented(conn)
    if not key:
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
    return _presented(conn)


def _presented(conn: HTTPConnection) -> str:
    """The key a request presents (Bearer, or Basic's password), or ""."""
    scheme, _, value = conn.headers.get("authorization", "").partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return ""
        return decoded.partition(":")[2]
    return ""
