"""``/openapi.json`` describes what the routes that read their request raw accept: the
modelled bodies, the strategy and budget headers, and the error answers; every
reference in it resolves and the document is valid OpenAPI. No engine runs here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema_rs
import pytest

from server.app import create_app
from server.pipeline.budgets import HEADERS, STRATEGY_HEADER
from server.routes.openapi import ERROR_REF
from server.settings import Settings

GENERATION = ("/v1/chat/completions", "/v1/completions")
ERROR_STATUSES = ("400", "401", "404", "408", "413", "429", "503")


@pytest.fixture(scope="module")
async def doc() -> dict[str, Any]:
    app = create_app(Settings())  # no lifespan: the schema needs no engine
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        response = await client.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def _refs(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _resolve(doc: dict[str, Any], ref: str) -> object:
    assert ref.startswith("#/"), ref
    node: object = doc
    for part in ref[2:].split("/"):
        assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
        node = node[part]
    return node


def test_every_reference_resolves_and_the_document_is_valid(doc: dict[str, Any]) -> None:
    import schemathesis

    refs = set(_refs(doc))
    assert "#/components/schemas/ErrorEnvelope" in refs
    for ref in refs:
        _resolve(doc, ref)
    schemathesis.openapi.from_dict(doc).validate()  # raises on an invalid document


@pytest.mark.parametrize("path", GENERATION)
def test_generation_bodies_are_modelled(doc: dict[str, Any], path: str) -> None:
    body = doc["paths"][path]["post"]["requestBody"]
    assert body["required"] is True
    schema = body["content"]["application/json"]["schema"]
    first = "messages" if "chat" in path else "prompt"
    assert schema["required"] == ["model", first]
    props = schema["properties"]
    for name in ("model", "n", "max_tokens", "temperature", "stream", "strategy", "budget"):
        assert name in props, name
    budget = props["budget"]["anyOf"][0]
    assert set(budget["properties"]) == set(HEADERS)
    assert budget["additionalProperties"] is False
    # The published schema and the server agree on the obvious cases.
    good: dict[str, Any] = {"model": "m", first: [{"role": "user", "content": "hi"}]}
    if first == "prompt":
        good[first] = "hi"
    validator = jsonschema_rs.validator_for(schema)
    assert validator.is_valid(good)
    assert validator.is_valid({**good, "budget": {"thinking": 8, "samples": 2}})
    assert not validator.is_valid({**good, "n": 0})
    assert not validator.is_valid({**good, "budget": {"thinking": -1}})
    assert not validator.is_valid({"model": "m"})


@pytest.mark.parametrize("path", GENERATION)
def test_budget_and_strategy_headers_are_listed(doc: dict[str, Any], path: str) -> None:
    params = {p["name"]: p for p in doc["paths"][path]["post"]["parameters"]}
    for name in (STRATEGY_HEADER, *HEADERS.values(), "X-Request-Id"):
        assert params[name]["in"] == "header" and params[name]["required"] is False
    assert params["X-Budget-Thinking"]["schema"] == {"type": "integer", "minimum": 0}
    assert params["X-Budget-Samples"]["schema"] == {"type": "integer", "minimum": 1}


@pytest.mark.parametrize("path", GENERATION)
def test_error_answers_use_the_envelope(doc: dict[str, Any], path: str) -> None:
    responses = doc["paths"][path]["post"]["responses"]
    assert set(responses["200"]["content"]) == {"application/json", "text/event-stream"}
    for status in ERROR_STATUSES:
        answer = responses[status]
        assert answer["description"]
        schema = answer["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}
        assert "X-Request-Id" in answer["headers"]
    assert "Retry-After" in responses["429"]["headers"]
    envelope = _resolve(doc, "#/components/schemas/ErrorEnvelope")
    assert isinstance(envelope, dict)
    detail = _resolve(doc, envelope["properties"]["error"]["$ref"])
    assert isinstance(detail, dict)
    assert set(detail["properties"]) == {"message", "type", "param", "code"}


def test_batch_routes_document_body_query_and_errors(doc: dict[str, Any]) -> None:
    create = doc["paths"]["/v1/pets/batches"]["post"]
    assert create["requestBody"]["content"]["application/jsonl"]["schema"] == {"type": "string"}
    query = {p["name"] for p in create["parameters"] if p["in"] == "query"}
    assert query == {"total_budget", "average_budget", "cap", "round_size", "seed", "draws"}
    listed = doc["paths"]["/v1/pets/batches"]["get"]
    assert {p["name"] for p in listed["parameters"]} == {"limit", "after"}
    for path in (
        "",
        "/{batch_id}",
        "/{batch_id}/cancel",
        "/{batch_id}/output",
        "/{batch_id}/events",
    ):
        for method, op in doc["paths"][f"/v1/pets/batches{path}"].items():
            errors = {s: a for s, a in op["responses"].items() if s[0] in "45" and s != "422"}
            assert {"401", "503"} <= set(errors), (method, path)
            for answer in errors.values():
                schema = answer["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}
    assert "404" in doc["paths"]["/v1/pets/batches/{batch_id}"]["get"]["responses"]


BATCH_API = {
    ("post", "/v1/files"),
    ("get", "/v1/files"),
    ("get", "/v1/files/{file_id}"),
    ("get", "/v1/files/{file_id}/content"),
    ("delete", "/v1/files/{file_id}"),
    ("post", "/v1/batches"),
    ("get", "/v1/batches"),
    ("get", "/v1/batches/{batch_id}"),
    ("post", "/v1/batches/{batch_id}/cancel"),
}


def test_the_batch_api_documents_its_upload_create_pages_and_errors(doc: dict[str, Any]) -> None:
    """FastAPI infers nothing for these routes (they read their request raw): the
    upload's form, the create's fields and every error answer come from
    ``server.routes.openapi_batch_api``, which schemathesis then fuzzes."""
    found = {
        (m, p)
        for p, ops in doc["paths"].items()
        for m in ops
        if p.startswith(("/v1/files", "/v1/batches"))
    }
    assert found == BATCH_API
    form = doc["paths"]["/v1/files"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert form["schema"]["required"] == ["file", "purpose"]
    assert form["schema"]["properties"]["file"]["format"] == "binary"
    create = doc["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/json"]
    validator = jsonschema_rs.validator_for(create["schema"])
    good = {
        "input_file_id": "file-1",
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    assert validator.is_valid(good)
    assert validator.is_valid({**good, "allocation": {"method": "pets", "average_budget": 8}})
    assert not validator.is_valid({**good, "completion_window": "1h"})
    assert not validator.is_valid({**good, "allocation": {"method": "pets", "caps": 8}})
    for path in ("/v1/files", "/v1/batches"):
        params = {p["name"] for p in doc["paths"][path]["get"]["parameters"]}
        assert {"limit", "after"} <= params
    for method, path in BATCH_API:
        errors = {s: a for s, a in doc["paths"][path][method]["responses"].items() if s[0] in "45"}
        assert {"401", "503"} <= set(errors), (method, path)
        for status, answer in errors.items():
            if status != "422":  # FastAPI's own, for its path parameters
                assert answer["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}


def test_every_batch_api_route_is_described_and_every_description_has_a_route() -> None:
    from fastapi import APIRouter

    from server.routes import batch_api
    from server.routes.openapi_batch_api import undocumented

    assert undocumented(batch_api.router) == set()
    router = APIRouter()

    @router.get("/v1/files/{file_id}/other")
    async def other() -> None: ...

    assert ("GET", "/v1/files/{file_id}/other") in undocumented(router)  # the check can fail
