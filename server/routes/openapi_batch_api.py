"""What ``/openapi.json`` says about the OpenAI Batch API (``server/routes/batch_api.py``).

Those routes read their request themselves (a multipart form streamed against the file
limit, a JSON object checked field by field in ``server.batches.service``), so FastAPI
infers no body, no query and no error answer for them. ``document(router)`` attaches the
descriptions here to the router's routes by method and path (the routes' module stays as
it is), so that a client generator
or a fuzzer (``benchmarks.fuzz``, schemathesis) sees the upload form, the batch's fields
and the answers. Nothing here runs per request.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter
from fastapi.routing import APIRoute

from server.batches.allocation import METHODS
from server.batches.records import ENDPOINTS
from server.batches.service import MAX_PAGE, PURPOSES
from server.routes.openapi import error_answer

Schema = dict[str, Any]

_FILE: Final[Schema] = {
    "type": "object",
    "description": "OpenAI's file object.",
    "required": ["id", "object", "bytes", "filename", "purpose"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "file"},
        "bytes": {"type": "integer"},
        "created_at": {"type": "integer"},
        "filename": {"type": "string"},
        "purpose": {"type": "string"},
    },
}
_BATCH: Final[Schema] = {
    "type": "object",
    "description": "OpenAI's batch object (plus `allocation` for an allocation batch).",
    "required": ["id", "object", "status"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "batch"},
        "status": {"type": "string"},
        "input_file_id": {"type": "string"},
        "output_file_id": {"type": ["string", "null"]},
        "error_file_id": {"type": ["string", "null"]},
        "request_counts": {"type": "object"},
    },
}
_ALLOCATION: Final[Schema] = {
    "type": "object",
    "description": "One sample budget over the whole batch (PETS); exactly one of "
    "`total_budget` and `average_budget`. A `/v1/chat/completions` batch only.",
    "required": ["method"],
    "additionalProperties": False,
    "properties": {
        "method": {"enum": list(METHODS)},
        "total_budget": {"type": "integer", "minimum": 1},
        "average_budget": {"type": "number", "exclusiveMinimum": 0},
        "cap": {"type": "integer", "minimum": 1},
        "round_size": {"type": "integer", "minimum": 1},
        "seed": {"type": "integer", "minimum": 0},
        "draws": {"type": "integer", "minimum": 1},
    },
}
_CREATE: Final[Schema] = {
    "type": "object",
    "required": ["input_file_id", "endpoint", "completion_window"],
    "properties": {
        "input_file_id": {"type": "string", "description": "A file of purpose `batch`."},
        "endpoint": {"enum": list(ENDPOINTS)},
        "completion_window": {"const": "24h"},
        "metadata": {
            "anyOf": [
                {"type": "object", "additionalProperties": {"type": "string"}},
                {"type": "null"},
            ]
        },
        "allocation": {"anyOf": [_ALLOCATION, {"type": "null"}]},
    },
}
_UPLOAD: Final[Schema] = {
    "type": "object",
    "required": ["file", "purpose"],
    "properties": {
        "file": {"type": "string", "format": "binary", "description": "The JSONL file."},
        "purpose": {"enum": list(PURPOSES)},
    },
}


def _list_of(item: Schema) -> Schema:
    return {
        "type": "object",
        "required": ["object", "data", "has_more"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": item},
            "first_id": {"type": ["string", "null"]},
            "last_id": {"type": ["string", "null"]},
            "has_more": {"type": "boolean"},
        },
    }


def _query(name: str, doc: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "required": False, "description": doc, "schema": schema}


_PAGE: Final[list[Schema]] = [
    _query("limit", "Items per page.", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}),
    _query("after", "The last id of the page before.", {"type": "string"}),
]


def _answers(description: str, content: Schema, *errors: int) -> dict[str, Schema]:
    ok = {"description": description, "content": content}
    # 401 and 503 on every route: keys are checked first, and a server may run no batches.
    statuses = sorted({401, 503, *errors})
    return {"200": ok, **{str(s): error_answer(s, model=False) for s in statuses}}


def _json(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


# (method, path) -> ``openapi_extra`` of the route.
DOCS: Final[dict[tuple[str, str], Schema]] = {
    ("POST", "/v1/files"): {
        "requestBody": {
            "required": True,
            "description": "A multipart form: `file` (up to `--batch-max-file-bytes`) and "
            "`purpose` (`batch`).",
            "content": {"multipart/form-data": {"schema": _UPLOAD}},
        },
        "responses": _answers("The stored file.", _json(_FILE), 400, 408, 413, 429),
    },
    ("GET", "/v1/files"): {
        "parameters": [
            _query("purpose", "Only files of this purpose.", {"type": "string"}),
            *_PAGE,
        ],
        "responses": _answers("The tenant's files, newest first.", _json(_list_of(_FILE)), 400),
    },
    ("GET", "/v1/files/{file_id}"): {
        "responses": _answers("The file.", _json(_FILE), 404),
    },
    ("GET", "/v1/files/{file_id}/content"): {
        "responses": _answers(
            "The file's bytes.",
            {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            404,
        ),
    },
    ("DELETE", "/v1/files/{file_id}"): {
        "responses": _answers("The file is deleted.", _json({"type": "object"}), 404),
    },
    ("POST", "/v1/batches"): {
        "requestBody": {
            "required": True,
            "description": "OpenAI's batch create (`allocation` is thinkgate's extension).",
            "content": _json(_CREATE),
        },
        "responses": _answers("The new batch.", _json(_BATCH), 400, 404, 413, 415, 429),
    },
    ("GET", "/v1/batches"): {
        "parameters": _PAGE,
        "responses": _answers("The tenant's batches, newest first.", _json(_list_of(_BATCH)), 400),
    },
    ("GET", "/v1/batches/{batch_id}"): {
        "responses": _answers("The batch.", _json(_BATCH), 404),
    },
    ("POST", "/v1/batches/{batch_id}/cancel"): {
        "responses": _answers("The batch, `cancelling` or ended.", _json(_BATCH), 404),
    },
}


def document(router: APIRouter) -> APIRouter:
    """``router`` with ``DOCS`` attached to its routes. A route missing from ``DOCS`` keeps
    what FastAPI infers (``undocumented`` lists it; a test holds that list empty), so a
    new route never stops the server from starting."""
    for route in router.routes:
        if isinstance(route, APIRoute):
            for method in route.methods:
                extra = DOCS.get((method, route.path))
                if extra is not None:
                    route.openapi_extra = extra
    return router


def undocumented(router: APIRouter) -> set[tuple[str, str]]:
    """Routes of ``router`` without an entry in ``DOCS``, and entries naming no route."""
    routes = {
        (method, route.path)
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    return routes ^ set(DOCS)
