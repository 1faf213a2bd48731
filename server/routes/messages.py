"""POST /v1/messages (Anthropic Messages API); its errors use Anthropic's envelope."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.apis.messages.request import MessagesRequest, translate
from server.gateway import gateway
from server.pipeline.serving import serve_translated
from server.routes import openapi
from server.routes.guard import AUTHORIZED

router = APIRouter(dependencies=[AUTHORIZED])


@router.post(
    "/v1/messages",
    # The body is read raw by ``serve_translated``; the schema is documentation only.
    openapi_extra=openapi.translated_request(MessagesRequest, "an Anthropic Messages request."),
    responses=openapi.translated_responses(
        "message",
        ["id", "type", "role", "model", "content", "stop_reason", "usage"],
        "Anthropic's `message_start` ... `message_stop` events",
        anthropic=True,
    ),
)
async def messages(request: Request) -> Response:
    seal = gateway(request).seal
    return await serve_translated(request, partial(translate, seal=seal))
