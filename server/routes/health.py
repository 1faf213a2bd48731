"""GET /health (the process is worth keeping) and GET /ready (send it requests).

``/health`` is 200 while the process serves, drains or restarts its engine, and 503
once its engine is dead for good (the ``exit`` policy is stopping it): a liveness probe
never keeps a process whose engine is gone. ``/ready`` is 503 while starting, draining,
restarting the engine, or with the engine dead.

With a remote engine ``/ready`` also lists every vLLM server (state, load, processors,
last error); it is 200 while at least one server is admitted.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from core.errors import GatewayError
from server.errors import response_headers
from server.gateway import gateway

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> Response:
    status, code = "ok", 200
    lifecycle = getattr(request.app.state, "lifecycle", None)
    if lifecycle is not None and lifecycle.state == "draining":
        status = "draining"
    gw = getattr(request.app.state, "gateway", None)
    if gw is not None:
        if getattr(gw.engine, "restarting", False):
            status = "restarting"
        elif getattr(gw.engine, "dead", False):
            status, code = "engine_dead", 503
    return Response(
        orjson.dumps({"status": status}),
        status_code=code,
        media_type="application/json",
        headers=response_headers(request),
    )


@router.get("/ready")
async def ready(request: Request) -> Response:
    gw = gateway(request)  # 503 while starting or stopping
    gw.lifecycle.check_admission()  # 503 with Retry-After while draining
    servers = getattr(gw.engine, "servers", None)
    listed = servers() if callable(servers) else None
    try:
        await gw.engine.health()  # 503 once the engine is dead (remote: no server up)
    except GatewayError as err:
        if listed is None:
            raise
        # The error envelope, plus what each server is doing: the operator's first question.
        payload = {**err.envelope(), "servers": listed}
        return Response(
            orjson.dumps(payload),
            status_code=err.status,
            media_type="application/json",
            headers=response_headers(request),
        )
    ready: dict[str, object] = {"status": "ready", "model": gw.engine.model_name}
    if listed is not None:
        ready["servers"] = listed
    body = orjson.dumps(ready)
    return Response(body, media_type="application/json", headers=response_headers(request))
