"""GET /v1/models: the one model this server serves."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.auth import authorize
from server.errors import response_headers
from server.gateway import gateway

router = APIRouter()


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    gw = gateway(request)
    authorize(request, gw.settings)
    model = {
        "id": gw.engine.model_name,
        "object": "model",
        "created": gw.started_at,
        "owned_by": "thinkgate",
        "max_model_len": gw.engine.max_model_len,
        "strategies": gw.registry.names(),
    }
    body = orjson.dumps({"object": "list", "data": [model]})
    return Response(body, media_type="application/json", headers=response_headers(request))
