"""A batch line (or a Responses WebSocket turn) as a request to this gateway's own app, in
process (ASGI, no socket).

The line runs as its batch's tenant: the call carries the tenant's name in a header that
only this wrapper reads, and moves into the request's scope (``server.tenancy.auth.BATCH_TENANT``)
where ``authorize`` finds it. A client on the network cannot set it: its requests reach
the app without passing through here, and the app ignores the header.
"""

from __future__ import annotations

from typing import Final

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from core.base import JSON
from server.batches.runner import Answer, Call
from server.tenancy.auth import BATCH_TENANT

_HEADER: Final = b"x-thinkgate-batch-tenant"


def tenant_client(app: ASGIApp) -> httpx.AsyncClient:
    """A client of ``app`` in process whose requests run as the tenant that
    ``as_tenant(name)`` headers name (the caller closes it)."""

    async def as_tenant(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = [(k, v) for k, v in scope["headers"] if k != _HEADER]
            tenant = next((v.decode() for k, v in scope["headers"] if k == _HEADER), None)
            scope = {**scope, "headers": headers, BATCH_TENANT: tenant}
        await app(scope, receive, send)

    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=as_tenant, raise_app_exceptions=False),
        base_url="http://batch.internal",
        timeout=None,  # the server's own request_timeout_s ends a call that runs too long
    )


def as_tenant(tenant: str) -> dict[str, str]:
    """The headers that make a ``tenant_client`` request the tenant's."""
    return {_HEADER.decode(): tenant}


def in_process(app: ASGIApp) -> tuple[Call, httpx.AsyncClient]:
    """A ``Call`` into ``app`` and the client it uses (the caller closes it)."""
    client = tenant_client(app)

    async def call(endpoint: str, body: dict[str, JSON], tenant: str) -> Answer:
        r = await client.post(endpoint, json=body, headers=as_tenant(tenant))
        try:
            payload: JSON = r.json()
        except ValueError:
            payload = {"error": {"message": r.text, "type": "server_error"}}
        retry = r.headers.get("retry-after")
        return Answer(
            status=r.status_code,
            body=payload,
            request_id=r.headers.get("x-request-id", ""),
            retry_after_s=float(retry) if retry and retry.isdigit() else None,
        )

    return call, client
