"""Slow clients cannot hold a connection: the request head and the body each have a time
limit. Raw sockets against real uvicorn servers: one in this process running our
protocol and ``read_body`` (short limits, no engine), and the shared live server."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace
from urllib.parse import urlsplit

import orjson
import pytest
import uvicorn
from conftest import uvicorn_in_thread
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response

from server import errors
from server.pipeline.body import read_body
from server.process.http_timeouts import header_timeout_protocol
from server.process.metrics import Metrics
from server.settings import Settings

LIMIT_S = 0.6


# A JSON route's body must say it is JSON (a 415 otherwise: server.pipeline.body).
JSON_POST = b"POST /body HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def _app() -> FastAPI:
    app = FastAPI()
    errors.install(app)
    # What read_body reads of the gateway: its settings (and metrics, for errors).
    app.state.gateway = SimpleNamespace(
        settings=Settings(body_read_timeout_s=LIMIT_S), metrics=Metrics()
    )

    @app.post("/body")
    async def body(request: Request) -> Response:
        return Response(await read_body(request, 10_000))

    return app


@pytest.fixture(params=["httptools", "h11"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, int]]:
    """uvicorn with the head-timeout protocol (``LIMIT_S``) on a loopback port."""
    config = uvicorn.Config(
        _app(),
        lifespan="off",
        log_level="warning",
        http=header_timeout_protocol(LIMIT_S, http=request.param),
    )
    with uvicorn_in_thread(config, wait_s=10) as port:
        yield "127.0.0.1", port


def _until_closed(sock: socket.socket, wait_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and when it closed (seconds from now);
    fails if it is still open after ``wait_s``."""
    started = time.monotonic()
    sock.settimeout(wait_s)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            pytest.fail(f"connection still open after {wait_s} s; got {data[:200]!r}")
        if not chunk:
            return data, time.monotonic() - started
        data += chunk


def _envelope(answer: bytes) -> dict[str, object]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"connection: close" in head.lower()
    error: dict[str, object] = orjson.loads(body)["error"]
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"
    return error


def test_a_silent_connection_is_closed(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as sock:
        answer, after = _until_closed(sock, 5 * LIMIT_S)
    assert answer == b""  # nothing was asked: nothing to answer
    assert after < 3 * LIMIT_S


def test_a_dribbled_head_gets_408_and_is_closed(server: tuple[str, int]) -> None:
    head = JSON_POST + b"Content-Length: 2\r\nX-Slow: " + b"z" * 100
    with socket.create_connection(server) as sock:
        # One byte every LIMIT_S / 6, each well within the limit, until the server answers:
        # the limit is on the whole head, not on the gap between bytes.
        for byte in head:
            readable, _, _ = select.select([sock], [], [], LIMIT_S / 6)
            if readable:
                break
            sock.sendall(bytes([byte]))
        else:
            pytest.fail(f"the server let the head dribble for {len(head) * LIMIT_S / 6:.1f} s")
        answer, _ = _until_closed(sock, 5 * LIMIT_S)
    assert "request head" in str(_envelope(answer)["message"])


def test_a_reused_connection_gets_the_limit_again(server: tuple[str, int]) -> None:
    request = JSON_POST + b"Content-Length: 2\r\n\r\nok"
    with socket.create_connection(server) as sock:
        time.sleep(LIMIT_S / 2)  # a prompt client is not cut
        sock.sendall(request)
        sock.settimeout(5)
        # The head and the body may come in two writes: read until the body is in.
        first = sock.recv(65536)
        while not first.endswith(b"ok") and len(first) < 65536:
            more = sock.recv(65536)
            if not more:
                break
            first += more
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"ok")
        sock.sendall(b"POST /body HTTP/1.1\r\nHo")  # the next head stalls
        answer, after = _until_closed(sock, 5 * LIMIT_S)
    _envelope(answer)
    assert after < 3 * LIMIT_S


def test_a_slow_body_gets_408_and_is_closed(server: tuple[str, int]) -> None:
    with socket.create_connection(server) as sock:
        sock.sendall(JSON_POST + b"Content-Length: 2000\r\n\r\n0123456789")
        answer, after = _until_closed(sock, 5 * LIMIT_S)
    assert "did not arrive" in str(_envelope(answer)["message"])
    assert after < 3 * LIMIT_S


def test_the_factory_refuses_what_it_cannot_build() -> None:
    with pytest.raises(ValueError):
        header_timeout_protocol(0)
    with pytest.raises(ValueError):
        header_timeout_protocol(1, http="zttp")


# --- the live server (thinkgate serve, default limits)


def _live(base_url: str) -> tuple[str, int]:
    url = urlsplit(base_url)
    return url.hostname or "127.0.0.1", url.port or 80


@pytest.mark.vllm
@pytest.mark.slow
def test_live_server_answers_a_stalled_body_with_408(base_url: str, served_model: str) -> None:
    body = orjson.dumps({"model": served_model, "messages": [{"role": "user", "content": "hi"}]})
    limit = Settings().body_read_timeout_s
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        "Content-Type: application/json\r\n"
        f"X-Request-Id: slow-body\r\nContent-Length: {len(body) + 2000}\r\n\r\n"
    ).encode()
    with socket.create_connection(_live(base_url)) as sock:
        sock.sendall(head + body[:10])
        answer, after = _until_closed(sock, limit + 30)
    assert b"x-request-id: slow-body" in answer.lower()
    assert "did not arrive" in str(_envelope(answer)["message"])
    assert after >= limit - 1


@pytest.mark.vllm
@pytest.mark.slow
def test_live_server_closes_a_stalled_head(base_url: str) -> None:
    limit = Settings().header_read_timeout_s
    with socket.create_connection(_live(base_url)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        answer, _ = _until_closed(sock, limit + 10)
    _envelope(answer)
