"""Offline PETS batches: ``/v1/pets/batches`` (JSONL in, job id, poll, JSONL out).

``POST /v1/pets/batches?total_budget=N`` (or ``average_budget=B``; also ``cap``,
``round_size``, ``seed``, ``draws``) with a JSONL body of ``{custom_id, body: {messages}}``
lines; ``GET /v1/pets/batches`` lists jobs (newest first; ``limit``, ``after``), ``GET
/{id}`` polls, ``GET /{id}/events`` streams snapshots (SSE), ``GET /{id}/output`` returns
JSONL once completed, ``POST /{id}/cancel`` stops it. Jobs are in the gateway's batch
store (``server.batches.pets.service``), so they outlive the process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from core.engine import SamplingConfig
from core.errors import BackendUnavailable, InvalidRequest, NotFound
from server.apis.openai import sse
from server.batches.allocation import tenant_cap
from server.batches.pets.job import BatchView
from server.batches.pets.service import RESOURCE_KEY, BatchJobs
from server.batches.pets_wire import (
    batch_list,
    batch_object,
    options_from,
    output_lines,
    parse_lines,
)
from server.gateway import gateway
from server.pipeline.body import read_body
from server.routes import openapi
from server.routes.guard import AUTHORIZED
from server.tenancy.auth import tenant_of

router = APIRouter(prefix="/v1/pets/batches", dependencies=[AUTHORIZED])


def _jobs(request: Request) -> tuple[BatchJobs, str]:
    """The job service and the request's tenant (whose jobs it sees)."""
    gw = gateway(request)
    tenant = tenant_of(request)
    jobs = gw.resources.get(RESOURCE_KEY)
    if jobs is None:
        raise BackendUnavailable("PETS batches are not enabled on this server")
    return jobs, tenant.name


async def _own(request: Request, batch_id: str) -> tuple[BatchJobs, BatchView]:
    """A job of the request's tenant (jobs from before tenants are everyone's); another
    tenant's is a 404, as one that does not exist."""
    jobs, tenant = _jobs(request)
    view = await jobs.snapshot(batch_id)
    if view.record.tenant not in ("", tenant):
        raise NotFound(f"no batch {batch_id!r}", param="batch_id")
    return jobs, view


def _json(obj: object) -> Response:
    return Response(orjson.dumps(obj), media_type="application/json")


@router.post("", openapi_extra=openapi.BATCH_CREATE)
async def create(request: Request) -> Response:
    (jobs, tenant), gw = _jobs(request), gateway(request)
    raw = await read_body(request, gw.settings.max_body_bytes, tenant=tenant_of(request))
    defaults = SamplingConfig(temperature=1.0, max_tokens=gw.engine.max_model_len)
    questions = parse_lines(
        raw.decode("utf-8", "replace"), gw.engine.tokens, defaults=defaults, max_questions=100_000
    )
    cap = tenant_cap(gw.settings.max_samples, gw.keys, tenant)  # the tenant's, if lower
    options = options_from(request.query_params, len(questions), max_cap=cap)
    return _json(batch_object(await jobs.submit(questions, options, tenant=tenant)))


@router.get("", openapi_extra=openapi.BATCH_LIST)
async def list_jobs(request: Request) -> Response:
    (jobs, tenant), params = _jobs(request), request.query_params
    raw = params.get("limit", "20")
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise InvalidRequest("limit must be an integer in [1, 100]", param="limit")
    views, more = await jobs.list_jobs(after=params.get("after"), limit=int(raw), tenant=tenant)
    return _json(batch_list(views, has_more=more))


@router.get("/{batch_id}", openapi_extra=openapi.BATCH_JOB)
async def retrieve(request: Request, batch_id: str) -> Response:
    return _json(batch_object((await _own(request, batch_id))[1]))


@router.post("/{batch_id}/cancel", openapi_extra=openapi.BATCH_JOB)
async def cancel(request: Request, batch_id: str) -> Response:
    jobs, _ = await _own(request, batch_id)
    return _json(batch_object(await jobs.cancel(batch_id)))


@router.get("/{batch_id}/output", openapi_extra=openapi.BATCH_OUTPUT)
async def output(request: Request, batch_id: str) -> Response:
    jobs, _ = await _own(request, batch_id)
    view, stored = await jobs.output(batch_id)
    lines = output_lines(view, stored)
    body = b"".join(orjson.dumps(line) + b"\n" for line in lines)
    return Response(body, media_type="application/jsonl")


@router.get("/{batch_id}/events", openapi_extra=openapi.BATCH_EVENTS)
async def events(request: Request, batch_id: str) -> StreamingResponse:
    jobs, _ = await _own(request, batch_id)  # an unknown id is a 404, not an empty stream

    async def frames() -> AsyncIterator[bytes]:
        async for snapshot in jobs.watch(batch_id):
            yield sse.data(batch_object(snapshot))
        yield sse.DONE

    return StreamingResponse(frames(), media_type="text/event-stream")
