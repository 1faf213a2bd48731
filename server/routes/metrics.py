"""GET /metrics: Prometheus text format."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.gateway import gateway
from server.process.metrics import CONTENT_TYPE

router = APIRouter()


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(gateway(request).metrics.render(), media_type=CONTENT_TYPE)
