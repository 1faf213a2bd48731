"""How the process stops: draining on SIGTERM, and exiting when the engine dies.

``server.cli`` binds ``stop`` (ask uvicorn to exit); the lifespan binds the event loop.
SIGTERM starts ``drain``: admission refuses new work with a 503 and Retry-After, ``/ready``
says 503 (load balancers stop sending), requests in flight run on until the teardown reserve
(``TEARDOWN_RESERVE_S``) before ``drain_timeout_s`` is up; what is left is then aborted
(``aborting`` wakes every waiter: JSON requests answer 503, streams send an error frame)
and the process exits 0 within ``drain_timeout_s`` of the signal. An engine that
dies under the ``exit`` policy calls ``fail``: exit status 4 once in-flight requests have
had their 503.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final, Literal

import structlog

from core.errors import BackendUnavailable

log = structlog.get_logger("thinkgate.lifecycle")

State = Literal["serving", "draining", "engine_dead"]
ENGINE_DEAD_EXIT: Final = 4  # the exit status a supervisor sees after an engine death
# What a stop needs after the drain: the aborted requests answer (milliseconds: each
# waiter is woken), the engines stop cleanly, side by side (vLLM's shutdown: on the
# 2-core testbed box the worker leaves 3 s after its engine core is told, the engine core
# 2 s later: 5 s), the interpreter exits. The drain
# keeps this much of ``drain_timeout_s`` (at most half of it) so that the process has
# exited when the timeout is up, which is what a supervisor's grace period (Kubernetes'
# terminationGracePeriodSeconds) expects.
TEARDOWN_RESERVE_S: Final = 7.0
_SETTLE_SHARE: Final = 0.5  # of the reserve, the most spent waiting for aborted answers


class Lifecycle:
    def __init__(self, *, drain_timeout_s: float, retry_after_s: int) -> None:
        self.drain_timeout_s = drain_timeout_s
        self.retry_after_s = retry_after_s
        self.state: State = "serving"
        self.exit_code = 0
        self._stop: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._aborting: asyncio.Future[None] | None = None
        self._drain: asyncio.Task[None] | None = None
        self._inflight: Callable[[], int] = lambda: 0

    # --- wiring (cli, lifespan)

    def bind_stop(self, stop: Callable[[], None]) -> None:
        """How to make the HTTP server exit (uvicorn's ``should_exit``)."""
        self._stop = stop

    def bind_loop(self, loop: asyncio.AbstractEventLoop, inflight: Callable[[], int]) -> None:
        self._loop = loop
        self._inflight = inflight
        self._aborting = loop.create_future()

    @property
    def teardown_reserve_s(self) -> float:
        """The end of the drain kept for aborting and stopping (see TEARDOWN_RESERVE_S)."""
        return min(TEARDOWN_RESERVE_S, self.drain_timeout_s / 2)

    # --- what requests ask

    @property
    def aborting(self) -> asyncio.Future[None]:
        """Done once the drain time is up: whoever still waits must answer and leave."""
        if self._aborting is None:
            self._aborting = asyncio.get_running_loop().create_future()
        return self._aborting

    def check_admission(self) -> None:
        """Raise the 503 a request gets while the server drains or its engine is dead."""
        if self.state == "draining":
            raise BackendUnavailable(
                "the server is shutting down; retry (another replica will answer)",
                code="shutting_down",
                retry_after_s=self.retry_after_s,
            )

    # --- what signals and the engine ask

    def request_drain(self) -> bool:
        """Start draining (thread- and signal-safe). False if already draining: the caller
        should then stop at once."""
        if self.state == "draining" or self._loop is None or self._loop.is_closed():
            return False
        self.state = "draining"
        self._loop.call_soon_threadsafe(self._start_drain)
        return True

    def fail(self, code: int = ENGINE_DEAD_EXIT) -> None:
        """The engine died under the ``exit`` policy: exit with ``code`` soon."""
        self.state = "engine_dead"
        self.exit_code = code
        loop = self._loop
        if loop is not None and not loop.is_closed():
            # A moment for the in-flight requests' 503s to leave before uvicorn stops.
            loop.call_later(0.5, self._request_stop)
        else:
            self._request_stop()

    def _request_stop(self) -> None:
        if self._stop is not None:
            self._stop()

    def _start_drain(self) -> None:
        self._drain = asyncio.get_running_loop().create_task(self._drain_then_stop())

    async def _drain_then_stop(self) -> None:
        started = time.monotonic()
        log.info(
            "server.process.draining", inflight=self._inflight(), timeout_s=self.drain_timeout_s
        )
        reserve = self.teardown_reserve_s
        deadline = started + self.drain_timeout_s - reserve
        while self._inflight() > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = self._inflight()
        if left:
            log.warning("server.drain_timeout", aborting=left, reserve_s=reserve)
            if not self.aborting.done():
                self.aborting.set_result(None)
            settle = time.monotonic() + reserve * _SETTLE_SHARE
            while self._inflight() > 0 and time.monotonic() < settle:
                await asyncio.sleep(0.05)
        log.info(
            "server.drained",
            seconds=round(time.monotonic() - started, 3),
            aborted=left,
            still_open=self._inflight(),
        )
        self._request_stop()
