"""GET /health (the process answers) and GET /ready (the engine serves)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.errors import response_headers
from server.state import gateway

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> Response:
    return Response(
        b'{"status":"ok"}', media_type="application/json", headers=response_headers(request)
    )


@router.get("/ready")
async def ready(request: Request) -> Response:
    gw = gateway(request)  # 503 while starting or stopping
    await gw.engine.health()  # 503 once the engine is dead
    body = orjson.dumps({"status": "ready", "model": gw.engine.model_name})
    return Response(body, media_type="application/json", headers=response_headers(request))
