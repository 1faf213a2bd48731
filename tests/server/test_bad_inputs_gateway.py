"""The gateway's own checks of bad input, in the fast tier: every case of
tests/server/test_bad_inputs.py that never reaches an engine, against the app of
``thinkgate serve`` over a scripted engine that fails the test if it is called. The
status, the OpenAI envelope and the param are what the live server answers (the live
module keeps what only vLLM checks, and one case per route end to end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from bad_input_cases import CHAT_CASES, COMPLETION_CASES, M, check_error

from core.engine import GenerateRequest


def _never(request: GenerateRequest) -> Any:
    raise AssertionError(f"a bad input reached the engine: {request.request_id}")


async def _send(app: Any, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    if isinstance(body, bytes):
        return await app.client.post(
            path, content=body, headers={"content-type": "application/json", **headers}
        )
    body = {k: (app.model if v == M else v) for k, v in body.items()}
    return await app.client.post(path, json=body, headers=headers)


@pytest.mark.parametrize(
    ("name", "body", "headers", "status", "param"), CHAT_CASES, ids=[c[0] for c in CHAT_CASES]
)
async def test_chat_bad_input_never_reaches_the_engine(
    scripted_app: Callable[..., Any],
    name: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    param: str | None,
) -> None:
    async with scripted_app(_never) as app:
        error = check_error(await _send(app, "/v1/chat/completions", body, headers), status, param)
        assert app.engine.calls == []
    if param and param.startswith(("X-Budget", "budget.")):
        assert error["code"] == "invalid_budget"


@pytest.mark.parametrize(("body", "param"), COMPLETION_CASES)
async def test_completions_bad_input_never_reaches_the_engine(
    scripted_app: Callable[..., Any], body: dict[str, Any], param: str | None
) -> None:
    async with scripted_app(_never) as app:
        check_error(await _send(app, "/v1/completions", body, {}), 400, param)
        assert app.engine.calls == []


async def test_unknown_route_and_method(scripted_app: Callable[..., Any]) -> None:
    async with scripted_app(_never) as app:
        check_error(await app.client.get("/v1/nothing"), 404, None)
        wrong = await app.client.put("/v1/chat/completions", json={})
        check_error(wrong, 405, None)
        assert wrong.headers["Allow"] == "POST" and wrong.headers["x-should-retry"] == "false"
        check_error(await app.client.get("/v1/chat/completions"), 405, None)
        compact = await app.client.post("/v1/responses/compact", json={"model": app.model})
        check_error(compact, 404, None)
        assert "compaction is not supported" in compact.text
