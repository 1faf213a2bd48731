"""Optional API keys on /v1/* and /ui when keys are configured: ``Authorization: Bearer
<key>``, or HTTP Basic with the key as the password (any user name). Basic is what a
browser can send: it asks for it when /ui answers 401 with ``WWW-Authenticate: Basic``,
and then sends it with the page's own requests to the same server."""

from __future__ import annotations

import base64
import binascii

import structlog
from starlette.requests import HTTPConnection

from server.tenants import Keyring, Tenant


def authorize(conn: HTTPConnection, keys: Keyring) -> Tenant:
    """The request's tenant; raises ``Unauthorized`` unless no keys are configured or it
    presents one (``server.tenants``: compared in constant time). The tenant is bound to
    the request's log lines and kept on ``conn.state.tenant``."""
    tenant = keys.identify(_presented(conn))
    conn.state.tenant = tenant.name
    structlog.contextvars.bind_contextvars(tenant=tenant.name)
    return tenant


def api_key(conn: HTTPConnection, keys: Keyring) -> str | None:
    """The request's API key once ``authorize`` passed it (None: no keys configured)."""
    if not keys.enabled:
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
