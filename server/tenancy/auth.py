"""Optional API keys on /v1/* and /ui when keys are configured: ``Authorization: Bearer
<key>``, or HTTP Basic with the key as the password (any user name). Basic is what a
browser can send: it asks for it when /ui answers 401 with ``WWW-Authenticate: Basic``,
and then sends it with the page's own requests to the same server.

Each request is authorized once, by the dependency its route declares
(``server.routes.guard``), which calls ``authorize``; the pipeline and the routes read
the tenant it found with ``tenant_of``."""

from __future__ import annotations

import base64
import binascii
from typing import Final

import structlog
from starlette.requests import HTTPConnection

from core.errors import Unauthorized
from server.tenancy.tenants import Keyring, Tenant

# A batch line's request, made in process (server.batches.calls), names its batch's
# tenant here in the ASGI scope, which no network client can reach.
BATCH_TENANT: Final = "thinkgate.batch_tenant"
# Where ``authorize`` keeps the tenant on ``conn.state`` (``conn.state.tenant`` holds its
# name, which the error handler and the metrics read).
_AUTHORIZED: Final = "authorized_tenant"


def authorize(conn: HTTPConnection, keys: Keyring) -> Tenant:
    """The request's tenant; raises ``Unauthorized`` unless no keys are configured or it
    presents one (``server.tenancy.tenants``: compared in constant time), or it is a batch line
    of a tenant still in the keys. The tenant is bound to the request's log lines and
    kept on ``conn.state`` (``tenant_of``; its name on ``conn.state.tenant``)."""
    batch_tenant = conn.scope.get(BATCH_TENANT)
    if isinstance(batch_tenant, str):
        found = keys.named(batch_tenant)
        if found is None:
            raise Unauthorized(f"tenant {batch_tenant!r} is no longer in the keys")
        tenant = found
    else:
        tenant = keys.identify(presented(conn))
    setattr(conn.state, _AUTHORIZED, tenant)
    conn.state.tenant = tenant.name
    structlog.contextvars.bind_contextvars(tenant=tenant.name)
    return tenant


def tenant_of(conn: HTTPConnection) -> Tenant:
    """The tenant ``authorize`` found for this request; raises ``RuntimeError`` when it
    did not run: a route behind the keys that forgot the dependency fails loudly."""
    tenant = getattr(conn.state, _AUTHORIZED, None)
    if not isinstance(tenant, Tenant):
        raise RuntimeError(
            f"{conn.url.path} was not authorized: its route lacks the dependency "
            "(server.routes.guard.AUTHORIZED)"
        )
    return tenant


def is_batch_line(conn: HTTPConnection) -> bool:
    return isinstance(conn.scope.get(BATCH_TENANT), str)


def api_key(conn: HTTPConnection, keys: Keyring) -> str | None:
    """The request's API key once ``authorize`` passed it (None: no keys configured)."""
    if not keys.enabled:
        return None
    return presented(conn)


def presented(conn: HTTPConnection) -> str:
    """The key a request presents (Bearer, Basic's password, or ``x-api-key``), or ""."""
    if "authorization" not in conn.headers and (key := conn.headers.get("x-api-key")):
        return key.strip()  # Anthropic's own header, which its SDK and curl examples send
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
