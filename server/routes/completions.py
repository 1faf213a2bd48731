"""POST /v1/completions (one prompt: text or token ids)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.apis.openai.protocol import CompletionRequest
from server.pipeline.serving import serve
from server.routes import openapi
from server.routes.guard import AUTHORIZED

router = APIRouter(dependencies=[AUTHORIZED])


@router.post(
    "/v1/completions",
    # The body is read raw by ``serve``; the schema is documentation only.
    openapi_extra=openapi.generation_request(CompletionRequest),
    responses=openapi.generation_responses("text_completion"),
)
async def completions(request: Request) -> Response:
    return await serve(request, "completion")
