"""``x-should-retry``: the OpenAI and Anthropic SDKs retry 408, 409, 429 and 5xx unless the
answer says otherwise. A failure another try cannot fix (a 4xx, a request that ran past
its limit) says ``false``, so a long multi-sample request is not sent again; a full
server (429, 503) says ``true`` with ``Retry-After``. Real handlers (``server.errors``)
over real HTTP in process."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from core.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    GatewayError,
    InvalidBudget,
    InvalidRequest,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
)
from server import errors

CASES: list[tuple[GatewayError, int, str | None, str | None]] = [
    (InvalidRequest("bad"), 400, "false", None),
    (InvalidBudget("a plan that cannot fit"), 400, "false", None),
    (Unauthorized("no key"), 401, "false", None),
    (NotFound("no such response"), 404, "false", None),
    (PayloadTooLarge("too big"), 413, "false", None),
    (Overloaded("full", retry_after_s=3), 429, "true", "3"),
    (BackendUnavailable("draining"), 503, "true", "1"),
    (BackendUnavailable("restarting", retry_after_s=5), 503, "true", "5"),
    (BackendTimeout("ran past request_timeout_s"), 504, "false", None),
    (BackendError("engine crashed"), 500, None, None),
]


def _app(err: GatewayError) -> FastAPI:
    app = FastAPI()
    errors.install(app)

    @app.post("/v1/chat/completions")
    async def fail() -> None:
        raise err

    @app.post("/v1/messages")
    async def fail_messages() -> None:
        raise err

    return app


@pytest.mark.parametrize(("err", "status", "retry", "after"), CASES)
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
async def test_retry_headers_say_whether_another_try_can_help(
    err: GatewayError, status: int, retry: str | None, after: str | None, path: str
) -> None:
    transport = httpx.ASGITransport(app=_app(err))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.post(path, json={})
    assert r.status_code == status
    assert r.headers.get("x-should-retry") == retry
    assert r.headers.get("Retry-After") == after


async def test_the_openai_sdk_does_not_retry_a_request_that_failed_for_good() -> None:
    import openai

    calls = 0
    app = _app(BackendTimeout("ran past request_timeout_s"))

    @app.middleware("http")
    async def count(request, call_next):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return await call_next(request)

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    client = openai.AsyncOpenAI(
        base_url="http://t/v1", api_key="x", max_retries=3, http_client=http
    )
    with pytest.raises(openai.APIStatusError) as failed:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert failed.value.status_code == 504 and calls == 1
