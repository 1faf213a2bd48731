"""GET /v1/models and GET /v1/models/{id}: the one model this server serves, in a shape
both SDKs read (OpenAI's ``id``, ``object``, ``created``, ``owned_by``; Anthropic's
``type``, ``display_name``, ``created_at`` and the list's ``has_more``, ``first_id``,
``last_id``)."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from server import presets
from server.errors import response_headers
from server.gateway import Gateway, gateway
from server.routes.guard import AUTHORIZED
from strategies.profile import PROFILE_KEY, tokenizer_fingerprint

router = APIRouter(dependencies=[AUTHORIZED])


def _model(gw: Gateway) -> dict[str, object]:
    created = datetime.fromtimestamp(gw.started_at, tz=UTC).isoformat().replace("+00:00", "Z")
    return {
        "id": gw.engine.model_name,
        "object": "model",
        "created": gw.started_at,
        "owned_by": "thinkgate",
        "type": "model",
        "display_name": gw.engine.model_name,
        "created_at": created,
        "max_model_len": gw.engine.max_model_len,
        "max_input_tokens": gw.engine.max_model_len,
        "strategies": gw.registry.names(),
        # What a profile is fitted on and checked against (``thinkgate fit``).
        "tokenizer_fingerprint": tokenizer_fingerprint(gw.engine.tokens),
        **_profile(gw),
    }


def _profile(gw: Gateway) -> dict[str, object]:
    """The profile the planners run on (``thinkgate serve --profile``), where one is."""
    profile = gw.resources.get(PROFILE_KEY)
    if profile is None:
        return {}
    return {"profile": {"name": profile.name, "tokenizer": profile.tokenizer}}


def _json(request: Request, body: object) -> Response:
    return Response(
        orjson.dumps(body), media_type="application/json", headers=response_headers(request)
    )


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    gw = gateway(request)
    model = _model(gw)
    # Each preset is a model a client can name (server.presets).
    named = [
        {
            **model,
            "id": f"{model['id']}@{name}",
            "display_name": f"{model['id']}@{name}",
            "preset": {"strategy": p.strategy, "budget": dict(p.budget)},
        }
        for name, p in gw.presets.items()
    ]
    data = [model, *named]
    page = {"object": "list", "data": data, "has_more": False}
    return _json(request, {**page, "first_id": data[0]["id"], "last_id": data[-1]["id"]})


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(request: Request, model_id: str) -> Response:
    gw = gateway(request)
    preset = presets.resolve(model_id, gw.engine.model_name, gw.presets)  # 404s another
    model = _model(gw)
    if preset is not None:
        model |= {"id": model_id, "display_name": model_id}
    return _json(request, model)
