"""POST /v1/completions (one prompt: text or token ids)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server.serving import serve

router = APIRouter()


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    return await serve(request, "completion")
