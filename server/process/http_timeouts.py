"""A time limit on the request head, which uvicorn does not have.

uvicorn's ``timeout_keep_alive`` only runs between requests of a kept-alive connection:
the client's first byte cancels it, and a new connection gets no timer at all. A client
that connects and sends nothing, or dribbles its headers a byte at a time, so holds a
connection (a file descriptor, and a slot under any connection limit) for as long as it
likes. ``header_timeout_protocol(seconds)`` is uvicorn's HTTP/1.1 protocol (httptools, or
h11 where httptools is missing) with one timer more: armed when a connection opens and
when a later request's first byte arrives, cancelled once that request's headers are
complete. When it fires, a client that sent part of a head gets a 408 in the error
envelope; the connection is then closed.

The body has its own limit, in the handler (``server.pipeline.body.read_body``,
``body_read_timeout_s``); these are the two halves of ``thinkgate serve``'s defence
against slow clients. Passed to uvicorn as ``uvicorn.Config(..., http=...)``.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol

from core.errors import RequestTimeout

try:  # uvicorn's own choice under http="auto"; optional (uvicorn[standard])
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - exercised where httptools is not installed
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


def _timeout_answer(seconds: float) -> bytes:
    body = orjson.dumps(
        RequestTimeout(f"the request head did not arrive within {seconds} s").envelope()
    )
    head = (
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _HeadTimer:
    """The timer both protocol classes share; the subclasses say when a head starts/ends."""

    header_timeout_s: ClassVar[float] = 10.0
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any  # uvicorn's RequestResponseCycle of the request being answered, or None
    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes: bool = False  # part of a head has arrived since the timer was armed

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_expired)

    def _disarm_head_timer(self) -> None:
        self._head_bytes = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        answering = self.cycle is not None and not self.cycle.response_complete
        # A 408 only where it cannot land inside another response (a pipelined request
        # whose head stalls while the one before it is still being answered).
        if self._head_bytes and not answering:
            self.transport.write(_timeout_answer(self.header_timeout_s))
        self.transport.close()


if HttpToolsProtocol is not None:

    class HttpToolsHeadTimeout(_HeadTimer, HttpToolsProtocol):
        """uvicorn's httptools protocol with the head timer (see the module doc)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_timer()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_bytes = True
            self._arm_head_timer()

        def on_headers_complete(self) -> None:
            self._disarm_head_timer()
            super().on_headers_complete()


class H11HeadTimeout(_HeadTimer, H11Protocol):
    """uvicorn's h11 protocol with the head timer (see the module doc)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        import h11

        # h11 parses whole heads: waiting for a request (IDLE) means a head is pending.
        if self.conn.their_state is h11.IDLE and data:
            self._head_bytes = True
            self._arm_head_timer()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_head_timer()


def header_timeout_protocol(seconds: float, *, http: str = "auto") -> type[asyncio.Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` that closes a connection whose
    request head takes longer than ``seconds``. ``http``: ``auto`` (httptools when
    installed, as uvicorn picks), ``httptools`` or ``h11``."""
    if seconds <= 0:
        raise ValueError(f"header timeout must be positive, got {seconds}")
    base: type[_HeadTimer]
    if http == "h11" or (http == "auto" and HttpToolsProtocol is None):
        base = H11HeadTimeout
    elif http in ("auto", "httptools") and HttpToolsProtocol is not None:
        base = HttpToolsHeadTimeout
    else:
        raise ValueError(f"no head-timeout protocol for http={http!r}")
    cls = type(base.__name__, (base,), {"header_timeout_s": float(seconds)})
    return cls
