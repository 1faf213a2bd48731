"""Who may reach the server at all, before any key is read: no open door on a network, no
page elsewhere driving a server on a user's own machine.

* ``open_door``: ``thinkgate serve`` refuses a non-loopback bind without keys (every caller
  would be the one tenant, reading every file, batch and stored response) unless
  ``--allow-unauthenticated-network`` says so.
* ``Exposure``: a ``Host`` outside ``--allowed-hosts`` is a 400 (on a loopback
  bind only loopback names by default: DNS rebinding cannot point another name here); a
  browser request from another origin (its ``Origin`` header) to a state-changing route
  or to the live view is a 403 unless ``--allowed-origins`` names that origin. A JSON
  route's ``Content-Type`` is checked where its body is read (``server.pipeline.body``):
  the types a page may send without asking (``text/plain``, forms) are a 415.
``server.routes.guard.ExposureGuard`` applies the rules to every request, before routing.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection, Request

from core.errors import CrossOrigin, InvalidRequest
from server.settings import Settings

LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "::1")
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def is_loopback(host: str) -> bool:
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def open_door(settings: Settings) -> str | None:
    """Why ``settings`` must not start (None: they may)."""
    keyed = bool(settings.api_keys) or settings.keys_file is not None
    if keyed or is_loopback(settings.host) or settings.allow_unauthenticated_network:
        return None
    return (
        f"refusing to serve {settings.host}:{settings.port} without keys: anyone who reaches "
        "it could read every file, batch and stored response. Set --api-keys or --keys-file "
        "(THINKGATE_API_KEYS, THINKGATE_KEYS_FILE), bind 127.0.0.1, or pass "
        "--allow-unauthenticated-network to serve it open on purpose."
    )


def allowed_hosts(settings: Settings) -> tuple[str, ...] | None:
    """The ``Host`` names served (None: any)."""
    if settings.allowed_hosts:
        return tuple(h.lower() for h in settings.allowed_hosts)
    return LOOPBACK_NAMES if is_loopback(settings.host) else None


def _host_allowed(name: str, hosts: tuple[str, ...]) -> bool:
    return any(
        name == h or (h.startswith("*.") and name.endswith(h[1:])) or h == "*" for h in hosts
    )


def _hostname(header: str) -> str:
    """``Host``'s name without its port (``[::1]:8000`` -> ``::1``)."""
    return (urlsplit(f"//{header}").hostname or "").lower()


@dataclass(frozen=True, slots=True)
class Exposure:
    """The ``Host`` and ``Origin`` rules of one server."""

    hosts: tuple[str, ...] | None  # None: any
    origins: frozenset[str]

    @classmethod
    def of(cls, settings: Settings) -> Exposure:
        origins = frozenset(o.rstrip("/").lower() for o in settings.allowed_origins)
        return cls(allowed_hosts(settings), origins)

    def refusal(self, request: Request) -> InvalidRequest | CrossOrigin | None:
        """Why ``request`` is refused before routing (None: it is not)."""
        watched = request.method not in _SAFE_METHODS or request.url.path.startswith("/ui")
        return self._refusal(request, request.method, watched=watched)

    def socket_refusal(self, conn: HTTPConnection) -> InvalidRequest | CrossOrigin | None:
        """Why a WebSocket handshake is refused (None: it is not). Always watched: a page
        elsewhere may open a socket to any server its user reaches, and the handshake is
        a GET that starts work."""
        return self._refusal(conn, "WEBSOCKET", watched=True)

    def _refusal(
        self, request: HTTPConnection, method: str, *, watched: bool
    ) -> InvalidRequest | CrossOrigin | None:
        host = request.headers.get("host", "")
        if self.hosts is not None and host and not _host_allowed(_hostname(host), self.hosts):
            return InvalidRequest(
                f"Host {host!r} is not served here (--allowed-hosts)", code="host_not_allowed"
            )
        origin = request.headers.get("origin")
        if origin is None or origin.rstrip("/").lower() in self.origins:
            return None
        if watched and urlsplit(origin).netloc.lower() != host.lower():
            return CrossOrigin(
                f"a request from {origin} (another origin) to {method} "
                f"{request.url.path} is refused; --allowed-origins lists the pages that may"
            )
        return None
