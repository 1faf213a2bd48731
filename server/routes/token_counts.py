"""The token-count routes clients call before they send a turn: Anthropic's
``POST /v1/messages/count_tokens`` and OpenAI's ``POST /v1/responses/input_tokens``.

Each reads its API's request body (Anthropic's without ``max_tokens``, OpenAI's with
every field optional but ``input``), renders it as the generation route would (the chat
template, the tools it offers) and counts the prompt's tokens on the served tokenizer. A
prompt past the model's context is counted all the same: knowing that it does not fit is
what the count is for. Nothing reaches the engine.
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from core.errors import InvalidRequest
from server.apis.messages import request as messages_request
from server.apis.responses import request as responses_request
from server.errors import response_headers
from server.gateway import Gateway, gateway
from server.pipeline.body import read_body
from server.pipeline.builders import chat_prompt_ids
from server.routes.guard import AUTHORIZED

router = APIRouter(dependencies=[AUTHORIZED])


def _object(raw: bytes) -> dict[str, object]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


async def _body(request: Request) -> tuple[Gateway, dict[str, object]]:
    gw = gateway(request)
    return gw, _object(await read_body(request, gw.settings.max_body_bytes))


def _json(request: Request, body: dict[str, object]) -> Response:
    return Response(
        orjson.dumps(body), media_type="application/json", headers=response_headers(request)
    )


@router.post("/v1/messages/count_tokens")
async def count_message_tokens(request: Request) -> Response:
    gw, body = await _body(request)
    if "max_tokens" in body:
        raise InvalidRequest("max_tokens: not a field of count_tokens", param="max_tokens")
    body["max_tokens"] = 1  # required by the Messages body, meaningless for a count
    call = messages_request.translate(orjson.dumps(body), seal=gw.seal)
    return _json(request, {"input_tokens": len(chat_prompt_ids(gw, call.chat))})


@router.post("/v1/responses/input_tokens")
async def count_response_tokens(request: Request) -> Response:
    gw, body = await _body(request)
    body.setdefault("model", gw.engine.model_name)  # optional here
    if "input" not in body:
        raise InvalidRequest("input: the input to count is required", param="input")
    call = responses_request.translate(orjson.dumps(body), seal=gw.seal)
    count = len(chat_prompt_ids(gw, call.chat))
    return _json(request, {"object": "response.input_tokens", "input_tokens": count})
