"""Reading a request's raw body under the server's limits: its size (the server's, or
its tenant's if lower: a 413 before it is all read) and the time it may take to arrive
(a 408). The generation routes and the batch routes read their bodies here."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from starlette.datastructures import FormData
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message

from core.errors import PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from server.errors import ClientGone
from server.tenancy.tenants import Tenant

# JSON, and the JSON lines a PETS batch is: none of them is a type a page elsewhere may
# send without asking (text/plain, forms), so a cross-site "simple" request never lands.
JSON_TYPES: Final = ("application/json", "application/jsonl", "application/x-ndjson")


def _check_media_type(request: Request) -> None:
    given = request.headers.get("content-type", "")
    kind = given.split(";", 1)[0].strip().lower()
    if kind in JSON_TYPES or (kind.startswith("application/") and kind.endswith("+json")):
        return
    raise UnsupportedMediaType(
        f"Content-Type {given or '(none)'!r}: send the body as application/json"
    )


@dataclass(frozen=True, slots=True)
class _Bound:
    """A body's limit: the server's, or the tenant's ``max_body_bytes`` where lower (a
    refusal by the tenant's is counted in its metrics)."""

    limit: int
    whose: str
    owner: str | None
    gw: object

    @classmethod
    def of(cls, request: Request, limit: int, tenant: Tenant | None, what: str) -> _Bound:
        gw = getattr(request.app.state, "gateway", None)
        bound = cls(limit, "the limit", None, gw)
        own = None if tenant is None else tenant.limits.max_body_bytes
        if tenant is not None and own is not None and own < limit:
            bound = cls(own, f"tenant {tenant.name!r}'s limit", tenant.name, gw)
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > bound.limit:
            raise bound.too_large(f"the {what} is {declared} bytes; {bound.whose} is {bound.limit}")
        return bound

    def too_large(self, message: str) -> PayloadTooLarge:
        metrics = getattr(self.gw, "metrics", None)
        if self.owner is not None and metrics is not None:
            metrics.tenant_rejected(self.owner, "max_body_bytes")
        return PayloadTooLarge(message)


async def read_body(request: Request, limit: int, *, tenant: Tenant | None = None) -> bytes:
    """The raw body, refusing more than ``limit`` bytes (or the tenant's
    ``max_body_bytes``, if lower) with a 413 before reading it all, and a body that takes
    longer than the server's ``body_read_timeout_s`` to arrive (408)."""
    _check_media_type(request)
    gw = getattr(request.app.state, "gateway", None)
    timeout = gw.settings.body_read_timeout_s if gw is not None else None
    bound = _Bound.of(request, limit, tenant, "body")
    limit, whose, too_large = bound.limit, bound.whose, bound.too_large
    chunks: list[bytes] = []
    size = 0
    try:
        # A client that announces a body and sends it slowly (or never) would otherwise
        # hold its connection and this handler forever.
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large(f"the body exceeds {whose} of {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {timeout} s ({size} bytes came)"
        ) from None
    except ClientDisconnect:
        # Gone before its body arrived: the client's doing, not a server error (was a 500).
        if gw is not None:
            gw.metrics.aborted.labels("client_disconnect").inc()
        raise ClientGone() from None
    return b"".join(chunks)


async def read_form(
    request: Request, limit: int, *, tenant: Tenant | None = None, max_fields: int = 8
) -> FormData:
    """A multipart form of one file (``/v1/files``), bounded while it streams: the bytes
    counted as they arrive, chunked or not (a 413 at the first byte past ``limit``, or the
    tenant's ``max_body_bytes`` if lower, before the rest is spooled to disk), and the
    whole form due within ``body_read_timeout_s`` (a 408). Close it when done."""
    gw = getattr(request.app.state, "gateway", None)
    timeout = gw.settings.body_read_timeout_s if gw is not None else None
    bound = _Bound.of(request, limit, tenant, "upload")
    limit, whose, too_large = bound.limit, bound.whose, bound.too_large
    received = 0
    receive = request.receive

    async def counted() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise too_large(f"the upload exceeds {whose} of {limit} bytes")
        return message

    bounded = Request(request.scope, counted)
    try:
        async with asyncio.timeout(timeout):
            return await bounded.form(max_files=1, max_fields=max_fields)
    except TimeoutError:
        raise RequestTimeout(
            f"the upload did not arrive within {timeout} s ({received} bytes came)"
        ) from None
    except ClientDisconnect:
        if gw is not None:
            gw.metrics.aborted.labels("client_disconnect").inc()
        raise ClientGone() from None
