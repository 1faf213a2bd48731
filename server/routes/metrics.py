"""GET /metrics: Prometheus text format.

It names tenants and what they spent, so with API keys set it is behind them: a tenant's
key or the scraper's own ``metrics_key`` (``Authorization: Bearer``), else 401. Without
keys it is open, like every route."""

from __future__ import annotations

import hmac

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.gateway import gateway
from server.process.metrics import CONTENT_TYPE
from server.tenancy.auth import authorize, presented

router = APIRouter()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    gw = gateway(request)
    if gw.keys.enabled:
        scraper = gw.settings.metrics_key
        key = presented(request)
        if not (scraper and key and hmac.compare_digest(key.encode(), scraper.encode())):
            authorize(request, gw.keys)  # a tenant's key, or 401
    return Response(gw.metrics.render(), media_type=CONTENT_TYPE)
