"""POST /v1/chat/completions."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.apis.openai.protocol import ChatCompletionRequest
from server.pipeline.serving import serve
from server.routes import openapi
from server.routes.guard import AUTHORIZED

router = APIRouter(dependencies=[AUTHORIZED])


@router.post(
    "/v1/chat/completions",
    # The body is read raw by ``serve``; the schema is documentation only.
    openapi_extra=openapi.generation_request(ChatCompletionRequest),
    responses=openapi.generation_responses("chat.completion"),
)
async def chat_completions(request: Request) -> Response:
    return await serve(request, "chat")
