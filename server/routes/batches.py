"""Offline PETS batches: ``/v1/pets/batches`` (JSONL in, job id, poll, JSONL out).

``POST /v1/pets/batches?total_budget=N`` (or ``average_budget=B``; also ``cap``,
``round_size``, ``seed``, ``draws``) with a JSONL body of ``{custom_id, body: {messages}}``
lines; ``GET /{id}`` polls, ``GET /{id}/events`` streams snapshots (SSE), ``GET
/{id}/output`` returns JSONL once completed, ``POST /{id}/cancel`` stops it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from server import sse
from server.auth import authorize
from server.serving import read_body
from server.state import gateway
from strategies.engine import SamplingConfig
from strategies.errors import BackendUnavailable, InvalidRequest
from strategies.pets.batch import RESOURCE_KEY, BatchJobs, options_from, parse_lines

router = APIRouter(prefix="/v1/pets/batches")


def _jobs(request: Request) -> BatchJobs:
    gw = gateway(request)
    authorize(request, gw.settings)
    jobs = gw.resources.get(RESOURCE_KEY)
    if not isinstance(jobs, BatchJobs):
        raise BackendUnavailable("PETS batches are not enabled on this server")
    return jobs


def _json(obj: object) -> Response:
    return Response(orjson.dumps(obj), media_type="application/json")


@router.post("")
async def create(request: Request) -> Response:
    jobs, gw = _jobs(request), gateway(request)
    raw = await read_body(request, gw.settings.max_body_bytes)
    defaults = SamplingConfig(temperature=1.0, max_tokens=gw.settings.max_model_len)
    questions = parse_lines(
        raw.decode("utf-8", "replace"), gw.engine.tokens, defaults=defaults, max_questions=100_000
    )
    options = options_from(request.query_params, len(questions), max_cap=gw.settings.max_samples)
    return _json(jobs.submit(questions, options).snapshot())


@router.get("/{batch_id}")
async def retrieve(request: Request, batch_id: str) -> Response:
    return _json(_jobs(request).get(batch_id).snapshot())


@router.post("/{batch_id}/cancel")
async def cancel(request: Request, batch_id: str) -> Response:
    return _json((await _jobs(request).cancel(batch_id)).snapshot())


@router.get("/{batch_id}/output")
async def output(request: Request, batch_id: str) -> Response:
    job = _jobs(request).get(batch_id)
    if job.status != "completed":
        raise InvalidRequest(f"batch {batch_id} is {job.status}; output exists once completed")
    body = b"".join(orjson.dumps(line) + b"\n" for line in job.output_lines())
    return Response(body, media_type="application/jsonl")


@router.get("/{batch_id}/events")
async def events(request: Request, batch_id: str) -> StreamingResponse:
    job = _jobs(request).get(batch_id)

    async def frames() -> AsyncIterator[bytes]:
        async for snapshot in job.watch():
            yield sse.data(snapshot)
        yield sse.DONE

    return StreamingResponse(frames(), media_type="text/event-stream")
