"""The HTTP client of the calls the gateway makes many at once: generation on vLLM servers
(``--engine remote``) and step scoring on a PRM server (``--prm-url``); the reward and
verifier clients (``engines/remote/scorer_clients.py``) post through it too.

Why aiohttp and not httpx here: a particle-filtering question behind servers is about a
hundred small calls (a step of every path, then the PRM), and httpx spent 1.4-1.7 ms of
the gateway's CPU on each (its pool, anyio streams, h11; 10 ms at 64 in flight through
one pool, 1.2-1.5 ms through pools of 8), aiohttp 0.23-0.31 ms, against the same echo
server at 8 to 64 calls in flight (``thinkgate bench http-clients``:
benchmarks/results/http_clients/http-clients.md). On a host whose cores also run the engines, that
CPU is taken from them. The remote engine's health checks and start-up checks stay on
httpx: they are rare.

``Calls`` is what the remote engine, ``RemotePrm`` and the scorer clients use:
``AiohttpCalls`` in the server, ``HttpxCalls`` over a given ``httpx.AsyncClient`` (tests
that script the wire with ``httpx.MockTransport``). Both raise ``CallFailed`` when no
answer comes (a connection that cannot open or breaks, a read past its time); an error
status is an answer.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

import httpx

if TYPE_CHECKING:
    import aiohttp

FailureKind = Literal["connect", "timeout", "broken"]

# Below uvicorn's 5 s keep-alive (vLLM's server): the gateway drops an idle connection
# before the server does, so a call never goes out on a socket the server is closing.
KEEPALIVE_S: Final = 4.0


class CallFailed(Exception):
    """No answer: ``connect`` (could not open), ``timeout`` (a read ran past its time),
    ``broken`` (the connection broke off)."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    content: bytes


@dataclass(frozen=True, slots=True)
class Transport:
    """How calls reach a server behind TLS and auth: a CA bundle that signs its
    certificate (None: the system's store) and headers every call carries."""

    ca_bundle: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    def ssl_context(self) -> ssl.SSLContext | None:
        return None if self.ca_bundle is None else ssl.create_default_context(cafile=self.ca_bundle)


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds to open a connection, and to wait for each read (None: no limit)."""

    connect: float | None
    read: float | None

    @classmethod
    def of(cls, seconds: float) -> Timeouts:
        """A scorer's: ``seconds`` per read, at most 5 of them to connect."""
        return cls(connect=min(5.0, seconds), read=seconds)


class StreamedAnswer(Protocol):
    status: int

    async def read(self) -> bytes: ...

    def lines(self) -> AsyncIterator[str]: ...


class Calls(Protocol):
    async def post(self, url: str, content: bytes, headers: Mapping[str, str]) -> Answer: ...

    def stream(
        self, url: str, content: bytes, headers: Mapping[str, str]
    ) -> AbstractAsyncContextManager[StreamedAnswer]: ...

    async def aclose(self) -> None: ...


def calls_over(
    client: httpx.AsyncClient | None, timeouts: Timeouts, transport: Transport | None = None
) -> Calls:
    """The given client's calls (tests), else the server's own (over ``transport``)."""
    return AiohttpCalls(timeouts, transport) if client is None else HttpxCalls(client)


# --- aiohttp (the server's)


class AiohttpCalls:
    """One aiohttp session (opened on first use, in the running loop), connections
    unbounded: the gateway's admission control bounds the calls, a pool must not queue
    behind it."""

    def __init__(self, timeouts: Timeouts, transport: Transport | None = None) -> None:
        self._timeouts = timeouts
        self._transport = transport or Transport()
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,
                    limit_per_host=0,
                    keepalive_timeout=KEEPALIVE_S,
                    ssl=self._transport.ssl_context() or True,
                ),
                headers=dict(self._transport.headers),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=None,
                    sock_connect=self._timeouts.connect,
                    sock_read=self._timeouts.read,
                ),
                # Ask for no compression (the bodies are small and local; a proxy in front
                # of the fleet would otherwise gzip them), and decode it if it comes anyway.
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
        return self._session

    async def post(self, url: str, content: bytes, headers: Mapping[str, str]) -> Answer:
        with _mapped():
            async with self._open().post(url, data=content, headers=dict(headers)) as r:
                return Answer(status=r.status, content=await r.read())

    @asynccontextmanager
    async def stream(
        self, url: str, content: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[StreamedAnswer]:
        with _mapped():
            async with self._open().post(url, data=content, headers=dict(headers)) as r:
                yield _AiohttpStream(r)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()


class _AiohttpStream:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._r = response
        self.status = response.status

    async def read(self) -> bytes:
        with _mapped():
            return await self._r.read()

    async def lines(self) -> AsyncIterator[str]:
        with _mapped():
            async for raw in self._r.content:
                yield raw.decode().rstrip("\r\n")


class _mapped:
    """aiohttp's failures as ``CallFailed`` (a context manager, so generators use it too)."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        # Anything else (a cancellation, the caller's own errors) passes through as it is.
        failure = None if exc is None else _failure(exc)
        if failure is not None:
            raise failure from exc
        return False


def _failure(exc: BaseException) -> CallFailed | None:
    import aiohttp

    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError):
        return CallFailed("connect", text)
    if isinstance(exc, aiohttp.SocketTimeoutError | TimeoutError):
        return CallFailed("timeout", text)
    if isinstance(exc, aiohttp.ClientError | ConnectionError):
        return CallFailed("broken", text)
    return None


# --- httpx (a given client: tests with a mock transport)


class HttpxCalls:
    """``Calls`` over a given ``httpx.AsyncClient``; closing leaves the client open."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def post(self, url: str, content: bytes, headers: Mapping[str, str]) -> Answer:
        try:
            r = await self._client.post(url, content=content, headers=dict(headers))
        except (httpx.HTTPError, AttributeError) as exc:
            raise _httpx_failure(exc) from exc
        return Answer(status=r.status_code, content=r.content)

    @asynccontextmanager
    async def stream(
        self, url: str, content: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[StreamedAnswer]:
        try:
            async with self._client.stream(
                "POST", url, content=content, headers=dict(headers)
            ) as r:
                yield _HttpxStream(r)
        except (httpx.HTTPError, AttributeError) as exc:
            raise _httpx_failure(exc) from exc

    async def aclose(self) -> None:
        return None


class _HttpxStream:
    def __init__(self, response: httpx.Response) -> None:
        self._r = response
        self.status = response.status_code

    async def read(self) -> bytes:
        return await self._r.aread()

    def lines(self) -> AsyncIterator[str]:
        return self._r.aiter_lines()


def _httpx_failure(exc: Exception) -> CallFailed:
    # A connection that breaks as it opens can surface from httpcore's anyio backend as
    # an AttributeError (the peer name of a socket already gone).
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return CallFailed("connect", text)
    if isinstance(exc, httpx.TimeoutException):
        return CallFailed("timeout", text)
    return CallFailed("broken", text)
