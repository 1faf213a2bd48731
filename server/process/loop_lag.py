"""How late the event loop runs: a probe for ``/metrics`` and a stall watchdog.

``LoopProbe`` sleeps ``INTERVAL_S`` in a task and records how much later than asked it
woke up (``thinkgate_event_loop_lag_seconds``): on a healthy loop that is well under a
millisecond; a request that holds the loop (a long JSON body encoded in one go, a
generator that never suspends) shows up as lag for everyone.

With ``loop_stall_ms`` set, a watchdog thread also samples the loop thread's stack when
the probe's heartbeat is older than that, and logs it (``loop.stall``) once per stall:
the stack names the code that held the loop, which a lag figure alone cannot.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import traceback
from typing import Final

import structlog
from prometheus_client import Histogram

log = structlog.get_logger("thinkgate.loop")

INTERVAL_S: Final = 0.05


class LoopProbe:
    def __init__(self, histogram: Histogram, *, stall_ms: float = 0.0) -> None:
        self._histogram = histogram
        self._stall_s = stall_ms / 1000.0
        self._beat = time.monotonic()
        self.max_lag_s = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start probing the running loop (and the watchdog when ``stall_ms`` > 0)."""
        self._task = asyncio.get_running_loop().create_task(self._probe())
        if self._stall_s > 0:
            loop_thread = threading.get_ident()
            self._thread = threading.Thread(
                target=self._watchdog, args=(loop_thread,), name="loop-watchdog", daemon=True
            )
            self._thread.start()

    async def aclose(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    async def _probe(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(INTERVAL_S)
            now = time.monotonic()
            self._beat = now
            lag = max(0.0, now - asked - INTERVAL_S)
            self.max_lag_s = max(self.max_lag_s, lag)
            self._histogram.observe(lag)

    def _watchdog(self, loop_thread: int) -> None:
        reported_beat = -1.0
        while not self._stop.wait(self._stall_s / 2):
            beat = self._beat
            late = time.monotonic() - beat - INTERVAL_S
            if late < self._stall_s or beat == reported_beat:
                continue
            reported_beat = beat  # one report per stall
            frame = sys._current_frames().get(loop_thread)
            stack = "".join(traceback.format_stack(frame, limit=12)) if frame else "(gone)"
            log.warning("loop.stall", held_ms=round(late * 1000), stack=stack)
