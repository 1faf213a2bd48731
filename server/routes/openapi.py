"""What ``/openapi.json`` says about the routes that read their request themselves.

The chat and completions routes parse their raw body (``server.pipeline.admit``: fast, and its
400s name the field the OpenAI way), and the batch routes read JSONL and query strings,
so FastAPI can infer none of their inputs. This module spells them out for the route
decorators (``openapi_extra=``, ``responses=``); nothing here runs per request.

- Request bodies: the JSON schema of the pydantic models in ``server.apis.openai.protocol``, inlined
  (their nested models need no components, so no reference can dangle).
- Headers: ``X-Strategy``, the ``X-Budget-*`` headers and ``X-Request-Id``.
- Errors: every error status with the ``ErrorEnvelope`` component, which the chat and
  completions routes register through FastAPI's ``responses=`` models.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel

from server.apis.openai.protocol import ErrorEnvelope
from server.batches.pets.input import MAX_TOTAL_BUDGET
from server.pipeline.budgets import HEADERS, STRATEGY_HEADER

Schema = dict[str, Any]

ERROR_REF: Final = "#/components/schemas/ErrorEnvelope"

ERRORS: Final[dict[int, str]] = {
    400: "Malformed JSON, a wrong shape or value, a bad budget (`code: invalid_budget`) "
    "or strategy (`code: unknown_strategy`); `param` names the field or header.",
    401: "`--api-keys` is set and no valid `Authorization: Bearer <key>` came.",
    404: "Unknown `model` (or route, or batch).",
    408: "The request came too slowly (`--body-read-timeout-s`); the connection is closed.",
    413: "The body is over `--max-body-bytes`.",
    415: "The body's `Content-Type` is not JSON (`code: unsupported_media_type`).",
    429: "Over `--max-inflight-requests` or `--max-inflight-samples`; see `Retry-After`.",
    500: "The engine failed.",
    503: "The engine is starting, restarting or dead, or the server is draining "
    "(`Retry-After` when waiting helps), or the request needs a resource this server has "
    "not attached (`code: resource_unavailable`, e.g. a `reward` scorer).",
    504: "The request ran past `--request-timeout-s`.",
}

_HEADER_DOCS: Final[dict[str, tuple[str, Schema]]] = {
    "thinking": ("Thinking tokens per sample.", {"type": "integer", "minimum": 0}),
    "solution": ("Answer tokens per sample.", {"type": "integer", "minimum": 0}),
    "samples": ("Trajectories drawn.", {"type": "integer", "minimum": 1}),
    "k": ("Answers returned (pass@k), at most the samples.", {"type": "integer", "minimum": 1}),
    "tokens": (
        "Completion tokens of the whole request (every sample, step and answer).",
        {"type": "integer", "minimum": 1},
    ),
    "deadline_ms": (
        "Milliseconds from the request's arrival to its last byte.",
        {"type": "integer", "minimum": 1},
    ),
    "thinking_min": (
        "Thinking tokens per sample before thinking may end.",
        {"type": "integer", "minimum": 0},
    ),
}

REQUEST_HEADERS: Final[list[Schema]] = [
    {
        "name": STRATEGY_HEADER,
        "in": "header",
        "required": False,
        "description": "Strategy to run (wins over the body's `strategy`); "
        "`GET /v1/models` lists them.",
        "schema": {"type": "string", "minLength": 1},
    },
    *(
        {
            "name": HEADERS[field],
            "in": "header",
            "required": False,
            "description": f"{doc} Wins over the body's `budget.{field}`.",
            "schema": schema,
        }
        for field, (doc, schema) in _HEADER_DOCS.items()
    ),
    {
        "name": "X-Request-Id",
        "in": "header",
        "required": False,
        "description": "Your id for this request (logs, and the response's `X-Request-Id`); "
        "printable ASCII, at most 128 characters, else the server makes one.",
        "schema": {"type": "string"},
    },
]

RESPONSE_HEADERS: Final[dict[str, Schema]] = {
    "X-Request-Id": {"description": "The request's id.", "schema": {"type": "string"}},
    "X-Budget-Applied": {
        "description": "The budget as applied (`thinking=64;solution=16`, or `none`), once "
        "resolved.",
        "schema": {"type": "string"},
    },
}
_RETRY_AFTER: Final[Schema] = {
    "description": "Seconds to wait before retrying.",
    "schema": {"type": "integer", "minimum": 0},
}


def inline_schema(model: type[BaseModel]) -> Schema:
    """``model``'s JSON schema with every ``$ref`` to its own ``$defs`` replaced by the
    definition (the models of ``server.apis.openai.protocol`` are not recursive)."""
    schema = model.model_json_schema()
    defs: dict[str, Schema] = schema.pop("$defs", {})

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name in seen:
                    raise ValueError(f"{model.__name__}: {name} is recursive; cannot inline")
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**resolve(defs[name], (*seen, name)), **resolve(rest, seen)}
            return {k: resolve(v, seen) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v, seen) for v in node]
        return node

    resolved: Schema = resolve(schema, ())
    return resolved


def error_answer(status: int, *, model: bool) -> Schema:
    """The OpenAPI response for an error ``status``: the envelope and its headers.

    ``model=True`` is for FastAPI's ``responses=`` (it registers ``ErrorEnvelope`` as a
    component and points at it); ``False`` points at that component directly (for
    ``openapi_extra=``)."""
    headers = dict(RESPONSE_HEADERS)
    if status in (429, 503):
        headers["Retry-After"] = _RETRY_AFTER
    answer: Schema = {"description": ERRORS[status], "headers": headers}
    if model:
        answer["model"] = ErrorEnvelope
    else:
        answer["content"] = {"application/json": {"schema": {"$ref": ERROR_REF}}}
    return answer


def generation_request(model: type[BaseModel]) -> Schema:
    """``openapi_extra`` of ``POST /v1/chat/completions`` and ``/v1/completions``."""
    return {
        "requestBody": {
            "required": True,
            "description": "A JSON object. Fields not listed must be options of the chosen "
            "strategy (its `body_options`, e.g. `alpha` for best-of-majority), else a 400 "
            "naming them; OpenAI features thinkgate does not implement (`functions`, "
            "`suffix`, ...) are a 400 unless neutral; `logprobs`, `response_format` or "
            "`tools` under a strategy that cannot honour them is a 400 naming it.",
            "content": {"application/json": {"schema": inline_schema(model)}},
        },
        "parameters": REQUEST_HEADERS,
    }


def generation_responses(object_name: str) -> dict[int | str, Schema]:
    """``responses`` of ``POST /v1/chat/completions`` and ``/v1/completions``."""
    ok: Schema = {
        "description": f"A `{object_name}` object, or with `stream: true` server-sent "
        "events (`data: {chunk}` frames, `: thinkgate.progress` comments, `data: [DONE]`).",
        "headers": RESPONSE_HEADERS,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["id", "object", "created", "model", "choices", "usage"],
                    "properties": {
                        "id": {"type": "string"},
                        "object": {"const": object_name},
                        "created": {"type": "integer"},
                        "model": {"type": "string"},
                        "choices": {"type": "array", "items": {"type": "object"}},
                        "usage": {"type": "object"},
                        "thinkgate": {
                            "type": "object",
                            "description": "strategy, samples drawn, budget applied, and "
                            "what the strategy reports",
                        },
                    },
                }
            },
            "text/event-stream": {"schema": {"type": "string"}},
        },
    }
    statuses = (400, 401, 404, 408, 413, 429, 500, 503, 504)
    return {200: ok, **{s: error_answer(s, model=True) for s in statuses}}


# --- PETS batches (server/routes/pets_batches.py)

_BATCH: Final[Schema] = {
    "type": "object",
    "description": "The batch object (OpenAI batch fields where they fit, plus `pets`).",
    "required": ["id", "object", "status"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "batch"},
        "status": {"type": "string"},
    },
}


def _query(name: str, doc: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "required": False, "description": doc, "schema": schema}


def _batch_answers(ok: Schema, *errors: int) -> Schema:
    # ``batch_id`` is a path parameter FastAPI documents itself (lists here would append).
    return {"200": ok, **{str(s): error_answer(s, model=False) for s in errors}}


BATCH_CREATE: Final[Schema] = {
    "requestBody": {
        "required": True,
        "description": 'JSONL: one `{"custom_id": ..., "body": {"messages": [...]}}` per line '
        "(`body` may also set `temperature`, `top_p`, `max_tokens`, `seed`).",
        "content": {"application/jsonl": {"schema": {"type": "string"}}},
    },
    "parameters": [
        _query(
            "total_budget",
            "Samples over the whole batch (or `average_budget`; exactly one).",
            {"type": "integer", "minimum": 1, "maximum": MAX_TOTAL_BUDGET},
        ),
        _query(
            "average_budget",
            "Samples per question on average, at most `cap` (or `total_budget`; exactly one).",
            {"type": "number", "exclusiveMinimum": 0},
        ),
        _query(
            "cap",
            "Most samples for one question (at most `--max-samples`).",
            {"type": "integer", "minimum": 1},
        ),
        _query(
            "round_size",
            "Questions drawn per engine round.",
            {"type": "integer", "minimum": 1, "maximum": 100_000},
        ),
        _query(
            "seed",
            "Seed of the allocation.",
            {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
        ),
        _query(
            "draws",
            "Monte Carlo draws of the allocator.",
            {"type": "integer", "minimum": 1, "maximum": 10_000},
        ),
    ],
    "responses": _batch_answers(
        {"description": "The new job.", "content": {"application/json": {"schema": _BATCH}}},
        400,
        401,
        408,
        413,
        503,
    ),
}

BATCH_LIST: Final[Schema] = {
    "parameters": [
        _query("limit", "Jobs per page.", {"type": "integer", "minimum": 1, "maximum": 100}),
        _query("after", "The last id of the page before.", {"type": "string"}),
    ],
    "responses": _batch_answers(
        {
            "description": "OpenAI's list object of jobs, newest first.",
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["object", "data", "has_more"],
                        "properties": {
                            "object": {"const": "list"},
                            "data": {"type": "array", "items": _BATCH},
                            "first_id": {"type": ["string", "null"]},
                            "last_id": {"type": ["string", "null"]},
                            "has_more": {"type": "boolean"},
                        },
                    }
                }
            },
        },
        400,
        401,
        503,
    ),
}

BATCH_JOB: Final[Schema] = {
    "responses": _batch_answers(
        {"description": "The job.", "content": {"application/json": {"schema": _BATCH}}},
        401,
        404,
        503,
    ),
}

BATCH_OUTPUT: Final[Schema] = {
    "responses": _batch_answers(
        {
            "description": "JSONL, one OpenAI batch output line per question, in input order.",
            "content": {"application/jsonl": {"schema": {"type": "string"}}},
        },
        400,
        401,
        404,
        503,
    ),
}

BATCH_EVENTS: Final[Schema] = {
    "responses": _batch_answers(
        {
            "description": "Server-sent events: a job snapshot per change, then `[DONE]`.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        401,
        404,
        503,
    ),
}


# --- the other APIs' generation routes (server/routes/responses.py, messages.py)

_ANTHROPIC_ERROR: Final[Schema] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
        "request_id": {"type": "string"},
    },
}


def translated_request(model: type[BaseModel], what: str) -> Schema:
    """``openapi_extra`` of ``POST /v1/responses`` and ``/v1/messages``."""
    return {
        "requestBody": {
            "required": True,
            "description": f"A JSON object: {what} Fields not listed must be options of "
            "the chosen strategy, else a 400 naming them.",
            "content": {"application/json": {"schema": inline_schema(model)}},
        },
        "parameters": REQUEST_HEADERS,
    }


def translated_responses(
    object_name: str, required: list[str], events: str, *, anthropic: bool
) -> dict[int | str, Schema]:
    """``responses`` of ``POST /v1/responses`` (OpenAI errors) and ``/v1/messages``
    (Anthropic's error envelope)."""
    ok: Schema = {
        "description": f"A `{object_name}` object, or with `stream: true` server-sent "
        f"events ({events}).",
        "headers": RESPONSE_HEADERS,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": required,
                    "properties": {
                        "id": {"type": "string"},
                        "type" if anthropic else "object": {"const": object_name},
                        "model": {"type": "string"},
                        "usage": {"type": "object"},
                        "thinkgate": {"type": "object"},
                    },
                }
            },
            "text/event-stream": {"schema": {"type": "string"}},
        },
    }
    statuses = (400, 401, 404, 408, 413, 429, 500, 503, 504)
    answers: dict[int | str, Schema] = {200: ok}
    for status in statuses:
        if anthropic:
            headers = dict(RESPONSE_HEADERS)
            if status in (429, 503):
                headers["Retry-After"] = _RETRY_AFTER
            answers[status] = {
                "description": ERRORS[status],
                "headers": headers,
                "content": {"application/json": {"schema": _ANTHROPIC_ERROR}},
            }
        else:
            answers[status] = error_answer(status, model=True)
    return answers
