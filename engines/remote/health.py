"""The servers behind ``RemoteEngine``: admission and health checks (``FleetHealth``).

Every server is verified before it takes a call (``upstream.verify``); the first one
verified is the reference the others must match. A watcher checks them every
``health_interval_s``: one that stops answering is ejected, one that verifies again is
re-admitted. The sole route (one URL: a router, or a single replica) is never ejected by
a failed call: its check reads what the router publishes (``/readiness`` where it has
one, else ``/health``).
"""

from __future__ import annotations

import asyncio
from typing import Final

import httpx
import structlog

from core.engine import ModelTokens
from engines.remote.balancer import PrefixIndex
from engines.remote.upstream import ServerFacts, ServerMismatch, Upstream, verify
from engines.settings import RemoteEngineSettings

log = structlog.get_logger("thinkgate.remote")

# A connection that breaks as it opens can surface from httpcore's anyio backend as an
# AttributeError (it reads the peer name of a socket already gone: ``'NoneType' object
# has no attribute 'getpeername'``, seen with a replica SIGKILLed under load): a broken
# connection like any httpx error, not a crash of the health check.
BROKEN: Final = (httpx.HTTPError, AttributeError)


class FleetHealth:
    """Admission and health checks over ``upstreams`` (``RemoteEngine``'s base): the
    engine sets the attributes declared here."""

    _settings: RemoteEngineSettings
    _client: httpx.AsyncClient  # health checks and verification
    _probe: str
    _reference: ServerFacts | None
    _prefixes: PrefixIndex
    tokens: ModelTokens
    upstreams: list[Upstream]

    @property
    def sole(self) -> bool:
        """One URL: the only route to the fleet (a router, or a single replica)."""
        return len(self.upstreams) == 1

    async def _first_admission(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.start_timeout_s
        while True:
            # In URL order, so the first server is the reference the others must match;
            # a mismatch refuses start-up (ServerMismatch propagates), naming the URL.
            for up in self.upstreams:
                if up.state != "up":
                    await self._admit(up, at_start=True)
            if any(u.state == "up" for u in self.upstreams):
                break
            if loop.time() >= deadline:
                errors = "; ".join(f"{u.url}: {u.last_error}" for u in self.upstreams)
                raise RuntimeError(
                    f"no vLLM server answered in {self._settings.start_timeout_s:g} s ({errors})"
                )
            await asyncio.sleep(min(1.0, self._settings.health_interval_s))
        log.info("remote.ready", servers=[u.status() for u in self.upstreams])

    async def _admit(self, up: Upstream, *, at_start: bool = False) -> None:
        """Verify ``up`` and mark it up, or record why not."""
        try:
            facts = await verify(
                self._client,
                up.url,
                tokens=self.tokens,
                probe=self._probe,
                protocol=self._settings.protocol,
                timeout_s=self._settings.connect_timeout_s + 10.0,
            )
            self._check_same(up.url, facts)
        except ServerMismatch as exc:
            repeated = up.state == "mismatch" and up.last_error == str(exc)
            up.set_state("mismatch", str(exc))
            if at_start:
                raise
            if not repeated:  # once per cause, not every health interval
                log.error("remote.mismatch", server=up.url, error=str(exc))
            return
        except httpx.HTTPError as exc:
            up.set_state("down", f"{type(exc).__name__}: {exc}")
            return
        except (KeyError, TypeError, ValueError) as exc:
            # Answers that are not what a vLLM server sends (a proxy's error page...).
            up.set_state("down", f"unexpected answer: {type(exc).__name__}: {exc}")
            return
        was = up.state
        up.facts = facts
        self._prefixes.forget(up.url)  # a server coming (back) up has a cold cache
        up.set_state("up")
        if was != "starting" or not at_start:
            log.info("remote.admitted", server=up.url, was=was, processors=sorted(facts.processors))

    def _check_same(self, url: str, facts: ServerFacts) -> None:
        ref = self._reference
        if ref is None:
            self._reference = facts
            return
        if facts.model_id != ref.model_id or facts.max_model_len != ref.max_model_len:
            raise ServerMismatch(
                f"{url}: serves {facts.model_id!r} with max_model_len {facts.max_model_len}; "
                f"the others serve {ref.model_id!r} with {ref.max_model_len}"
            )

    async def _watch(self) -> None:
        """Health checks: eject a server that stops answering, re-admit one that verifies.

        Nothing a server answers may end this loop: a check that fails unexpectedly is
        logged and the loop goes on (without it no server would ever come back)."""
        while True:
            await asyncio.sleep(self._settings.health_interval_s)
            results = await asyncio.gather(
                *(self._check(u) for u in self.upstreams), return_exceptions=True
            )
            for up, result in zip(self.upstreams, results, strict=True):
                if isinstance(result, Exception):
                    log.error("remote.check_failed", server=up.url, error=repr(result))

    async def _check(self, up: Upstream) -> None:
        if self.sole:
            await self._check_sole(up)
            return
        if up.state != "up":
            await self._admit(up)
            return
        ok, reason = await self._healthy(up, "/health")
        if not ok:
            self._eject(up, reason)

    async def _healthy(self, up: Upstream, path: str) -> tuple[bool, str]:
        try:
            answer = await self._client.get(
                f"{up.url}{path}", timeout=self._settings.connect_timeout_s
            )
        except BROKEN as exc:
            return False, f"{path}: {type(exc).__name__}: {exc}"
        if path == "/readiness":
            up.fleet = _fleet(answer)
        return answer.status_code == 200, f"{path} answered {answer.status_code}"

    async def _check_sole(self, up: Upstream) -> None:
        """The only route: up while it says it can serve. A router's ``/readiness`` (ready
        while one worker is healthy; its ``/health`` turns 503 as soon as any one is not),
        else ``/health`` (one vLLM server). Coming back, it is verified again; a
        verification that cannot finish through a router whose fleet is still settling
        (its ``/v1/models`` placed on a dead worker) keeps the facts it had."""
        if up.health_path is None:
            ok, _ = await self._healthy(up, "/readiness")
            up.health_path = "/readiness" if ok else "/health"
            if not ok:
                up.fleet = None
        ok, reason = await self._healthy(up, up.health_path)
        if up.state == "up":
            if not ok:
                log.warning("remote.not_ready", server=up.url, reason=reason)
                up.set_state("down", reason)
            return
        if not ok:
            up.last_error = reason
            return
        if up.facts is None or up.state == "mismatch":
            await self._admit(up)
            return
        facts = up.facts
        await self._admit(up)
        if up.state == "down":  # verification failed without a mismatch: serve on
            up.facts = facts
            up.set_state("up")
            log.info("remote.admitted", server=up.url, was="down", verified=False)

    def _eject(self, up: Upstream, reason: str) -> None:
        if up.state == "up":
            log.warning("remote.ejected", server=up.url, reason=reason)
            up.set_state("down", reason)


def _fleet(answer: httpx.Response) -> dict[str, int] | None:
    """A router's own view of its workers, from its ``/readiness`` body
    (``{"healthy_workers": n, "total_workers": m}`` from vLLM's router)."""
    try:
        data = answer.json()
        return {
            "healthy_workers": int(data["healthy_workers"]),
            "total_workers": int(data["total_workers"]),
        }
    except (ValueError, KeyError, TypeError):
        return None
