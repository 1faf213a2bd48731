"""POST /v1/responses (OpenAI Responses API, stateless subset)."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server import openapi
from server.gateway import gateway
from server.responses_request import ResponsesRequest, translate
from server.serving import serve_translated

router = APIRouter()


@router.post(
    "/v1/responses",
    # The body is read raw by ``serve_translated``; the schema is documentation only.
    openapi_extra=openapi.translated_request(ResponsesRequest, "an OpenAI Responses request."),
    responses=openapi.translated_responses(
        "response",
        ["id", "object", "status", "model", "output", "usage"],
        "`event: response.*` frames with `sequence_number`",
        anthropic=False,
    ),
)
async def responses(request: Request) -> Response:
    seal = gateway(request).seal
    return await serve_translated(request, partial(translate, seal=seal))
