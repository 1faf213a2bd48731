"""What stands before every route: ``ExposureGuard``, the ``Host`` and ``Origin`` rules
(an ASGI middleware, before routing), and ``AUTHORIZED``, the one authorization of a
request, the FastAPI dependency every route behind the API keys declares (/v1/* and /ui;
/health and /ready are open; /metrics checks the keys itself, a scraper's key included).
It runs before the route's handler, once per request (FastAPI caches a dependency within
a request), and keeps the tenant on the
request, where the handler and the pipeline read it (``server.tenancy.auth.tenant_of``)."""

from __future__ import annotations

from typing import Final

from fastapi import Depends
from fastapi.params import Depends as DependsParam
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import error_response
from server.gateway import gateway
from server.settings import Settings
from server.tenancy.auth import BATCH_TENANT, authorize
from server.tenancy.exposure import Exposure


async def authorized(request: Request) -> None:
    """Authorize the request (a 503 while the server starts or stops, a 401 without a
    key it knows: ``server.tenancy.auth.authorize``). Async, so that it runs on the
    event loop, in the request's own context (the tenant it binds to the log lines)."""
    authorize(request, gateway(request).keys)


AUTHORIZED: Final[DependsParam] = Depends(authorized)


class ExposureGuard:
    """``server.tenancy.exposure``'s ``Host`` and ``Origin`` rules on every request, before
    routing (an ASGI middleware); refusals in the route's own error envelope."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.exposure = Exposure.of(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A batch line runs in process (server.batches.calls): no browser, no DNS name.
        if scope["type"] == "http" and scope.get(BATCH_TENANT) is None:
            request = Request(scope)
            refusal = self.exposure.refusal(request)
            if refusal is not None:
                await error_response(request, refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)
