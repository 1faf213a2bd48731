"""engines.calls and engines.http_errors: the calls the gateway makes many at once, and one
mapping of their failures onto the error tree. httpx's MockTransport for the mapping;
aiohttp (the server's calls) against real sockets on loopback: refused, silent, cut off,
cancelled."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from core.errors import BackendError, BackendTimeout, BackendUnavailable, GatewayError
from engines.calls import AiohttpCalls, CallFailed, HttpxCalls, Timeouts
from engines.http_errors import post_json, transport_error


def _post(handler: Callable[[httpx.Request], httpx.Response]) -> object:
    async def go() -> object:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await post_json(HttpxCalls(client), "http://svc/x", {"a": 1}, "the verifier")

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
    err = transport_error("vLLM server http://a", CallFailed("connect", "refused"))
    assert isinstance(err, BackendUnavailable) and err.message.startswith("vLLM server http://a")
    late = transport_error("PRM server", CallFailed("timeout", "slow"))
    assert isinstance(late, BackendTimeout) and late.status == 504


# --- aiohttp against real sockets

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEADERS = {"content-type": "application/json"}


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/x"

    yield start
    for s in servers:
        s.close()


async def _request(reader: asyncio.StreamReader) -> bytes:
    """Read one request (headers and a content-length body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length)


def _answer(status: int, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def test_aiohttp_answers_and_error_statuses(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:  # one connection, kept alive across calls
            try:
                body = await _request(reader)
            except asyncio.IncompleteReadError:
                break
            seen.append(body)
            status = 500 if b"fail" in body else 200
            writer.write(_answer(status, b'{"echo": ' + body + b"}"))
            await writer.drain()
        writer.close()

    url = await serve(handler)
    calls = AiohttpCalls(Timeouts(connect=5, read=5))
    try:
        assert await post_json(calls, url, {"a": 1}, "svc") == {"echo": {"a": 1}}
        with pytest.raises(BackendError, match="svc answered HTTP 500"):
            await post_json(calls, url, {"fail": 1}, "svc")
        answer = await calls.post(url, b'{"b": 2}', HEADERS)
        assert (answer.status, answer.content) == (200, b'{"echo": {"b": 2}}')
    finally:
        await calls.aclose()
    assert len(seen) == 3


async def test_aiohttp_asks_for_no_compression_and_reads_it_anyway(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    """A proxy in front of the fleet may gzip what it is not told to leave alone."""
    heads: list[bytes] = []

    async def gzipping(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head.lower())
        body = gzip.compress(b'{"ok": true}')
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    url = await serve(gzipping)
    calls = AiohttpCalls(Timeouts(connect=2, read=2))
    try:
        assert await post_json(calls, url, {}, "svc") == {"ok": True}
    finally:
        await calls.aclose()
    assert b"accept-encoding" not in heads[0]


async def test_aiohttp_refused_is_connect() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    calls = AiohttpCalls(Timeouts(connect=2, read=2))
    try:
        with pytest.raises(CallFailed) as info:
            await calls.post(f"http://127.0.0.1:{port}/x", b"{}", HEADERS)
        assert info.value.kind == "connect"
        with pytest.raises(BackendUnavailable, match="PRM server could not be reached"):
            await post_json(calls, f"http://127.0.0.1:{port}/x", {}, "PRM server")
    finally:
        await calls.aclose()


async def test_aiohttp_silent_server_is_a_timeout(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        await asyncio.sleep(10)

    url = await serve(silent)
    calls = AiohttpCalls(Timeouts(connect=2, read=0.2))
    try:
        with pytest.raises(BackendTimeout):
            await post_json(calls, url, {}, "svc")
    finally:
        await calls.aclose()


async def test_aiohttp_cut_off_is_broken(serve: Callable[[Handler], Awaitable[str]]) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.close()

    url = await serve(cut)
    calls = AiohttpCalls(Timeouts(connect=2, read=2))
    try:
        with pytest.raises(CallFailed) as info:
            await calls.post(url, b"{}", HEADERS)
        assert info.value.kind == "broken"
    finally:
        await calls.aclose()


async def test_aiohttp_stream_reads_lines_and_a_cut_stream_is_broken(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    async def sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
        for frame in (b"data: 1\n\n", b"data: 2\n\n"):
            writer.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
            await writer.drain()
        if b"cut" in body:
            writer.close()  # mid-stream: no last chunk
            return
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    url = await serve(sse)
    calls = AiohttpCalls(Timeouts(connect=2, read=2))
    try:
        async with calls.stream(url, b"{}", HEADERS) as answer:
            assert answer.status == 200
            lines = [line async for line in answer.lines()]
        assert [x for x in lines if x] == ["data: 1", "data: 2"]
        got: list[str] = []
        with pytest.raises(CallFailed) as info:
            async with calls.stream(url, b'"cut"', HEADERS) as answer:
                async for line in answer.lines():
                    got.append(line)
        assert info.value.kind == "broken" and "data: 1" in got
    finally:
        await calls.aclose()


async def test_a_cancelled_call_closes_its_connection(
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    """The client left: the server sees the connection close (vLLM aborts the request)."""
    closed = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        if await reader.read(1) == b"":  # EOF: the client went away
            closed.set()

    url = await serve(slow)
    calls = AiohttpCalls(Timeouts(connect=2, read=None))
    try:
        task = asyncio.create_task(calls.post(url, b"{}", HEADERS))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(closed.wait(), 5)
    finally:
        await calls.aclose()
