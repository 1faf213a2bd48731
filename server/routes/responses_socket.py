"""The Responses API's WebSocket mode: ``GET /v1/responses`` upgraded to a WebSocket, on
which a client sends ``{"type": "response.create", ...}`` events (the body of ``POST
/v1/responses``, ``stream`` implied) and receives each response's stream events, the
same JSON objects the SSE stream carries, one a message; a refused turn is an ``error``
event (``status`` and the API's ``error`` object) and the socket stays open for the next.
Turns run one after another, each as a request of the socket's tenant through the app
itself (``server.batches.calls``), so every check, limit and store applies as over HTTP.

The handshake is refused (403, no upgrade) for a ``Host`` not served, a page on another
origin (``server.tenancy.exposure``: a browser sends any page's WebSocket with the user's
cookies and network) or a key the server does not know. ``background`` is refused, as on
OpenAI; ``stream_id`` multiplexing is not offered (a turn waits for the one before).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter
from starlette.websockets import WebSocket, WebSocketDisconnect

from core.errors import GatewayError, InvalidRequest
from server.batches.calls import as_tenant, tenant_client
from server.gateway import gateway
from server.tenancy.auth import authorize
from server.tenancy.exposure import Exposure

router = APIRouter()
_POLICY = 1008  # the close code of a refused handshake (sent as HTTP 403 before accepting)


@router.websocket("/v1/responses")
async def responses_socket(ws: WebSocket) -> None:
    try:
        gw = gateway(ws)
        refusal = Exposure.of(gw.settings).socket_refusal(ws)
        if refusal is not None:
            raise refusal
        tenant = authorize(ws, gw.keys)
    except GatewayError:
        await ws.close(code=_POLICY)
        return
    await ws.accept()
    async with tenant_client(ws.scope["app"]) as client:
        try:
            while True:
                event = await _next_event(ws)
                if event is not None:
                    await _turn(ws, client, event, tenant.name)
        except WebSocketDisconnect:
            return


async def _next_event(ws: WebSocket) -> dict[str, Any] | None:
    """The next ``response.create`` body (None: the message was refused, said so)."""
    raw = await ws.receive_text()
    try:
        event = orjson.loads(raw)
        if not isinstance(event, dict) or event.get("type") != "response.create":
            raise InvalidRequest('send {"type": "response.create", ...}', param="type")
        if event.get("background"):
            raise InvalidRequest("background is not supported over WebSocket", param="background")
    except orjson.JSONDecodeError:
        await _error(ws, InvalidRequest("the message is not JSON"))
        return None
    except InvalidRequest as exc:
        await _error(ws, exc)
        return None
    body = {k: v for k, v in event.items() if k not in ("type", "stream_id", "background")}
    return {**body, "stream": True}


async def _turn(ws: WebSocket, client: Any, body: dict[str, Any], tenant: str) -> None:
    """One response: its stream events forwarded as they come."""
    async with client.stream("POST", "/v1/responses", json=body, headers=as_tenant(tenant)) as r:
        if r.status_code != 200:
            raw = await r.aread()
            try:
                error = orjson.loads(raw).get("error")
            except (orjson.JSONDecodeError, AttributeError):
                error = {"message": raw.decode(errors="replace"), "type": "server_error"}
            await ws.send_text(_dumps({"type": "error", "status": r.status_code, "error": error}))
            return
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                await ws.send_text(line[6:])


async def _error(ws: WebSocket, err: GatewayError) -> None:
    await ws.send_text(_dumps({"type": "error", "status": err.status, **err.envelope()}))


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()
