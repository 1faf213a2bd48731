"""The OpenAI Batch API: ``/v1/files`` (upload, list, retrieve, content, delete) and
``/v1/batches`` (create, list, retrieve, cancel), per tenant (server.batches)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import APIRouter
from pydantic import RootModel
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from core.errors import BackendUnavailable, GatewayError, InvalidRequest, Overloaded
from server.apis.openai.validation import validate_json
from server.batches.file_parts import PART_BYTES
from server.batches.service import UPLOADS, Batches, listed, page_limit
from server.errors import response_headers
from server.gateway import gateway
from server.pipeline.body import read_body, read_form
from server.routes.guard import AUTHORIZED
from server.tenancy.auth import tenant_of

router = APIRouter(dependencies=[AUTHORIZED])
MULTIPART_SLACK = 64 * 1024  # the form's own bytes around the file


def _batches(request: Request) -> tuple[Batches, str]:
    gw = gateway(request)
    tenant = tenant_of(request)
    if gw.batches is None:
        raise BackendUnavailable("this server runs no batches", code="resource_unavailable")
    return gw.batches, tenant.name


def _json(request: Request, body: object) -> Response:
    return Response(
        orjson.dumps(body), media_type="application/json", headers=response_headers(request)
    )


@router.post("/v1/files")
async def upload(request: Request) -> Response:
    batches, owner = _batches(request)
    limit = batches.max_file_bytes
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidRequest(
            "send the file as multipart/form-data with fields 'file' and 'purpose'", param="file"
        )
    if batches.uploads.locked():  # each upload spools to disk: a cap on how many at once
        raise Overloaded(
            f"{UPLOADS} uploads are in progress; try again shortly", code="rate_limit_exceeded"
        )
    async with batches.uploads:
        try:
            form = await read_form(request, limit + MULTIPART_SLACK, tenant=tenant_of(request))
        except GatewayError:
            raise
        except Exception as exc:  # a malformed multipart body
            raise InvalidRequest(f"the form cannot be read: {exc}", param="file") from None
        try:
            upload = form.get("file")
            purpose = form.get("purpose")
            if not isinstance(upload, UploadFile):
                raise InvalidRequest("the form has no file field 'file'", param="file")
            if not isinstance(purpose, str):
                raise InvalidRequest("the form has no field 'purpose'", param="purpose")
            record = await batches.upload(owner, purpose, upload.filename or "", _chunks(upload))
        finally:
            await form.close()
    return _json(request, record.render())


async def _chunks(upload: UploadFile) -> AsyncIterator[bytes]:
    """The upload's spooled bytes a part at a time, never the whole file in memory."""
    while chunk := await upload.read(PART_BYTES):
        yield chunk


@router.get("/v1/files")
async def list_files(request: Request) -> Response:
    batches, owner = _batches(request)
    limit = page_limit(request.query_params.get("limit"))
    records = await batches.store.files(
        owner,
        purpose=request.query_params.get("purpose"),
        after=request.query_params.get("after"),
        limit=limit + 1,
    )
    return _json(request, listed([r.render() for r in records], limit))


@router.get("/v1/files/{file_id}")
async def retrieve_file(request: Request, file_id: str) -> Response:
    batches, owner = _batches(request)
    return _json(request, (await batches.file(owner, file_id)).render())


@router.get("/v1/files/{file_id}/content")
async def file_content(request: Request, file_id: str) -> Response:
    batches, owner = _batches(request)
    parts = await batches.reader(owner, file_id)
    return StreamingResponse(
        parts, media_type="application/octet-stream", headers=response_headers(request)
    )


@router.delete("/v1/files/{file_id}")
async def delete_file(request: Request, file_id: str) -> Response:
    batches, owner = _batches(request)
    await batches.delete(owner, file_id)
    return _json(request, {"id": file_id, "object": "file", "deleted": True})


@router.post("/v1/batches")
async def create_batch(request: Request) -> Response:
    batches, owner = _batches(request)
    raw = await read_body(request, gateway(request).settings.max_body_bytes)
    body = validate_json(_Object, raw).root
    record, counts = await batches.create(owner, body)
    return _json(request, record.render(counts))


@router.get("/v1/batches")
async def list_batches(request: Request) -> Response:
    batches, owner = _batches(request)
    limit = page_limit(request.query_params.get("limit"))
    found = await batches.store.batches(
        owner, after=request.query_params.get("after"), limit=limit + 1
    )
    return _json(request, listed([r.render(c) for r, c in found], limit))


@router.get("/v1/batches/{batch_id}")
async def retrieve_batch(request: Request, batch_id: str) -> Response:
    batches, owner = _batches(request)
    record, counts = await batches.batch(owner, batch_id)
    return _json(request, record.render(counts))


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(request: Request, batch_id: str) -> Response:
    batches, owner = _batches(request)
    record, counts = await batches.cancel(owner, batch_id)
    return _json(request, record.render(counts))


class _Object(RootModel[dict[str, object]]):
    """A JSON object (the batch's fields are checked by name in ``Batches.create``)."""
