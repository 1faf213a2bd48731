"""POST /v1/responses (OpenAI Responses API, stateless subset)."""

from __future__ import annotations

from functools import partial
from typing import Literal

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from core.errors import NotFound
from server.apis.responses.request import ResponsesRequest, Stored, translate
from server.apis.responses.store import owner_of, tenant_owner
from server.errors import response_headers
from server.gateway import gateway
from server.pipeline.serving import serve_translated
from server.routes import openapi
from server.routes.guard import AUTHORIZED
from server.tenancy.auth import api_key, is_batch_line, tenant_of

router = APIRouter(dependencies=[AUTHORIZED])


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
    gw = gateway(request)
    return await serve_translated(
        request, partial(translate, seal=gw.seal, stored=_stored(request))
    )


@router.post("/v1/responses/compact", include_in_schema=False)
async def compact(request: Request) -> Response:
    """OpenAI's compaction endpoint, which this server does not have: a 404 saying so (not
    the 405 of ``/v1/responses/{id}``'s methods), as clients probing for it expect."""
    raise NotFound(
        "POST /v1/responses/compact: compaction is not supported here; send the "
        "conversation, or continue with previous_response_id",
        param=None,
    )


def _stored(request: Request) -> Stored | None:
    gw = gateway(request)
    tenant = tenant_of(request)
    if gw.responses is None:
        return None
    owner = tenant_owner(tenant.name)
    # A batch line presents no key: it reads only what its tenant stored.
    legacy = owner if is_batch_line(request) else owner_of(api_key(request, gw.keys))
    return Stored(gw.responses, owner, legacy)


def _stored_or_404(request: Request) -> Stored:
    stored = _stored(request)
    if stored is None:
        raise NotFound("this server keeps no responses (--response-retention-s 0)")
    return stored


def _json(request: Request, body: object) -> Response:
    return Response(
        orjson.dumps(body), media_type="application/json", headers=response_headers(request)
    )


@router.get("/v1/responses/{response_id}")
async def retrieve(request: Request, response_id: str) -> Response:
    stored = _stored_or_404(request)
    return _json(request, stored.store.body(response_id, stored.readers))


@router.delete("/v1/responses/{response_id}")
async def delete(request: Request, response_id: str) -> Response:
    stored = _stored_or_404(request)
    stored.store.delete(response_id, stored.readers)
    return _json(request, {"id": response_id, "object": "response", "deleted": True})


@router.get("/v1/responses/{response_id}/input_items")
async def input_items(
    request: Request,
    response_id: str,
    order: Literal["asc", "desc"] = "desc",
    limit: int = 20,
    after: str | None = None,
) -> Response:
    """The items the response was answered from, OpenAI's list (newest first unless
    ``order=asc``; ``limit`` 1-100; ``after`` an item id)."""
    stored = _stored_or_404(request)
    items = stored.store.inputs(response_id, stored.readers)
    if order == "desc":
        items = items[::-1]
    if after is not None:
        ids = [i.get("id") for i in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[: max(1, min(100, limit))]
    return _json(
        request,
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > len(page),
        },
    )
