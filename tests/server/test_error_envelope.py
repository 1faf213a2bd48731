"""One error tree, one handler: every GatewayError subclass leaves as the OpenAI
envelope with its status; each engine maps its own foreign errors (no engine runs here)."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from starlette.requests import Request

from core import errors as tree
from core.budget import Budget
from engines.errors import mapped, unexpected
from engines.vllm_errors import convert, map_vllm_errors
from server import errors


def _subclasses(cls: type[tree.GatewayError]) -> list[type[tree.GatewayError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out


ALL = _subclasses(tree.GatewayError)
EXPECTED_STATUS = {
    "GatewayError": 500,
    "InvalidRequest": 400,
    "InvalidBudget": 400,
    "UnknownStrategy": 400,
    "OverTenantLimit": 400,
    "Unauthorized": 401,
    "NotFound": 404,
    "RequestTimeout": 408,
    "PayloadTooLarge": 413,
    "Overloaded": 429,
    "BackendError": 500,
    "BackendUnavailable": 503,
    "BackendTimeout": 504,
}


def _app(exc: Exception) -> FastAPI:
    app = FastAPI()
    errors.install(app)

    @app.get("/boom")
    async def boom(request: Request) -> None:
        request.state.budget = Budget(thinking=8)
        raise exc

    return app


async def _get(app: FastAPI, path: str = "/boom") -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        return await client.get(path, headers={"X-Request-Id": "rid-1"})


def test_the_tree_is_what_the_table_says() -> None:
    assert {c.__name__ for c in ALL} >= set(EXPECTED_STATUS)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
async def test_every_gateway_error_maps_to_envelope_and_status(
    cls: type[tree.GatewayError],
) -> None:
    exc = cls("bad thing") if cls is tree.Overloaded else cls("bad thing", param="p.q")
    response = await _get(_app(exc))
    assert response.status_code == cls.status
    if cls.__name__ in EXPECTED_STATUS:
        assert response.status_code == EXPECTED_STATUS[cls.__name__]
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"] == "bad thing"
    assert body["error"]["type"] == cls.type
    assert body["error"]["param"] == (None if cls is tree.Overloaded else "p.q")
    assert response.headers["X-Request-Id"] == "rid-1"
    assert response.headers["X-Budget-Applied"] == "thinking=8"
    if cls is tree.Overloaded:
        assert response.headers["Retry-After"] == "1"
    # A client too slow to send its request loses the connection with the answer.
    assert (response.headers.get("Connection") == "close") is (cls is tree.RequestTimeout)


async def test_unknown_route_and_crash_use_the_envelope() -> None:
    response = await _get(_app(RuntimeError("kaput")), "/nowhere")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"
    response = await _get(_app(RuntimeError("kaput")))
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "engine_error"


async def test_fastapi_validation_errors_become_400_with_the_field_path() -> None:
    app = FastAPI()
    errors.install(app)

    @app.get("/items")
    async def items(limit: int) -> dict[str, int]:
        return {"limit": limit}

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        response = await client.get("/items", params={"limit": "many"})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "query.limit"


def test_each_engine_maps_with_its_own_table() -> None:
    def table(exc: Exception) -> tree.GatewayError:
        return tree.InvalidRequest("mine") if isinstance(exc, KeyError) else unexpected(exc)

    with pytest.raises(tree.InvalidRequest) as mine, mapped(table):
        raise KeyError("k")
    assert isinstance(mine.value.__cause__, KeyError)
    with pytest.raises(tree.BackendError) as other, mapped(table):
        raise TypeError("boom")
    assert other.value.status == 500
    assert "unexpected engine error: TypeError: boom" in str(other.value)


def test_vllm_errors_are_mapped_by_the_vllm_engines() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

    bad = convert(VLLMValidationError("temperature too hot", parameter="temperature"))
    assert isinstance(bad, tree.InvalidRequest) and bad.param == "temperature"
    assert "temperature too hot" in bad.message
    # No blanket "a ValueError is the client's fault": an unknown exception is a 500
    # that says it was unexpected.
    stray = convert(ValueError("n must be 1 for greedy"))
    assert type(stray) is tree.BackendError and "unexpected" in stray.message
    assert isinstance(convert(EngineDeadError()), tree.BackendUnavailable)
    # Most of vLLM's checks name no parameter: the message says which field it is.
    for message, param in (
        ("stop cannot contain an empty string.", "stop"),
        ("n must be 1 when using greedy sampling, got 2.", "n"),
        ("The decoder prompt cannot be empty", "prompt"),
        ("Token id 999999 is out of vocabulary", "prompt"),
        ("top_k must be 0 (disable), or at least 1, got -3.", "top_k"),
        ("something vLLM has not said before", None),
    ):
        named = convert(VLLMValidationError(message))
        assert isinstance(named, tree.InvalidRequest) and named.param == param, message
    assert convert(VLLMValidationError("top_p must be", parameter="top_p")).param == "top_p"
    assert isinstance(convert(TimeoutError()), tree.BackendTimeout)
    generic = convert(EngineGenerateError())
    assert type(generic) is tree.BackendError and generic.status == 500

    with pytest.raises(tree.BackendUnavailable) as info, map_vllm_errors():
        raise EngineDeadError()
    assert isinstance(info.value.__cause__, EngineDeadError)
    original = tree.InvalidBudget("kept", param="budget.k")
    with pytest.raises(tree.InvalidBudget) as kept, map_vllm_errors():
        raise original
    assert kept.value is original


async def test_not_ready_before_the_lifespan_ran() -> None:
    from server.app import create_app
    from server.settings import Settings

    app = create_app(Settings())  # lifespan not run: no engine yet (starting/stopping)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        assert (await client.get("/health")).status_code == 200
        ready = await client.get("/ready")
        chat = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert ready.status_code == 503 and ready.json()["error"]["code"] == "engine_unavailable"
    assert chat.status_code == 503 and chat.headers["X-Request-Id"]
