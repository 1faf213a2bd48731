"""engines.http_errors: one mapping of HTTP failures onto the error tree, used by
the scorer clients and the remote engine (httpx's MockTransport, no sockets)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from core.errors import BackendError, BackendTimeout, BackendUnavailable, GatewayError
from engines.http_errors import post_json, transport_error


def _post(handler: Callable[[httpx.Request], httpx.Response]) -> object:
    async def go() -> object:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await post_json(client, "http://svc/x", {"a": 1}, "the verifier")

    return asyncio.run(go())


def _raise(exc: Exception) -> Callable[[httpx.Request], httpx.Response]:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return handler


@pytest.mark.parametrize(
    ("failure", "expected", "status"),
    [
        (httpx.ConnectError("refused"), BackendUnavailable, 503),
        (httpx.ConnectTimeout("no answer to SYN"), BackendUnavailable, 503),
        (httpx.RemoteProtocolError("peer closed"), BackendUnavailable, 503),
        (httpx.ReadTimeout("slow"), BackendTimeout, 504),
    ],
)
def test_wire_failures(failure: Exception, expected: type[GatewayError], status: int) -> None:
    with pytest.raises(expected) as info:
        _post(_raise(failure))
    assert info.value.status == status and "the verifier" in info.value.message


def test_error_status_and_bad_json_are_502() -> None:
    with pytest.raises(BackendError) as status:
        _post(lambda r: httpx.Response(500, json={"error": "boom"}))
    assert type(status.value) is BackendError and "HTTP 500" in status.value.message
    with pytest.raises(BackendError, match="invalid JSON"):
        _post(lambda r: httpx.Response(200, content=b"<html>"))
    assert _post(lambda r: httpx.Response(200, json={"scores": [1]})) == {"scores": [1]}


def test_transport_error_names_the_source() -> None:
    err = transport_error("vLLM server http://a", httpx.ConnectError("refused"))
    assert isinstance(err, BackendUnavailable) and err.message.startswith("vLLM server http://a")
