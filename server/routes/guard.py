"""The one authorization of a request: ``AUTHORIZED``, the FastAPI dependency every
route behind the API keys declares (/v1/* and /ui; /health, /ready and /metrics are
open). It runs before the route's handler, once per request (FastAPI caches a
dependency within a request), and keeps the tenant on the request, where the handler
and the pipeline read it (``server.tenancy.auth.tenant_of``)."""

from __future__ import annotations

from typing import Final

from fastapi import Depends
from fastapi.params import Depends as DependsParam
from starlette.requests import Request

from server.gateway import gateway
from server.tenancy.auth import authorize


async def authorized(request: Request) -> None:
    """Authorize the request (a 503 while the server starts or stops, a 401 without a
    key it knows: ``server.tenancy.auth.authorize``). Async, so that it runs on the
    event loop, in the request's own context (the tenant it binds to the log lines)."""
    authorize(request, gateway(request).keys)


AUTHORIZED: Final[DependsParam] = Depends(authorized)
