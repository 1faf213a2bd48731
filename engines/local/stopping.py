"""vLLM engines stopped side by side instead of one after another.

``AsyncLLM.shutdown`` waits for the engine's processes to leave cleanly (so nothing is
force-killed and no shared memory is left behind). On CPU the worker process takes about
3 s to leave after its engine core has stopped; the default ``thinkgate serve`` runs
three engines (generator, outcome reward, PRM), so stopped in turn they took 9 s, more
than the drain keeps for its end (``--drain-timeout-s``' last 7 s). :func:`stop` starts
each engine's stop in its own thread and returns; :func:`wait_stopped` (the end of the
app's lifespan) waits for all of them, so the stop takes as long as the slowest engine.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol


class Stoppable(Protocol):
    def shutdown(self, timeout: float | None = None) -> None: ...


_stops: list[threading.Thread] = []


def stop(llm: Stoppable, timeout_s: float) -> None:
    """Begin stopping ``llm`` (at most ``timeout_s`` before vLLM kills what is left)."""
    thread = threading.Thread(
        target=llm.shutdown, kwargs={"timeout": timeout_s}, name="thinkgate-engine-stop"
    )
    thread.start()
    _stops.append(thread)


def _join(timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _stops:
        _stops[0].join(max(0.0, deadline - time.monotonic()))
        if _stops[0].is_alive():
            return
        _stops.pop(0)


async def wait_stopped(timeout_s: float = 30.0) -> None:
    """Until every stop begun has finished (or ``timeout_s``)."""
    if _stops:
        await asyncio.to_thread(_join, timeout_s)
