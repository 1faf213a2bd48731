"""Garbage-collector pauses: the start-up heap frozen once the server is up, and every
collection timed for ``/metrics``.

Why: a collection runs on the event loop's thread and holds it; an oldest-generation
pass walks every tracked object the process holds, which after vLLM, torch and
transformers have loaded is millions of objects. Profiled under load on the testbed
(``vllm bench serve`` at 100 concurrent requests), collections were ~10% of the loop
thread's busy time, each one a pause in which no token went out to anyone: the p99
inter-token tails. vLLM's own server freezes its start-up heap for the same reason
(``vllm.utils.gc_utils.freeze_gc_heap``); frozen objects are never scanned again, so a
full pass only walks what requests allocated since.
"""

from __future__ import annotations

import atexit
import gc
import time
from typing import Any

import structlog
from prometheus_client import Histogram

log = structlog.get_logger("thinkgate.gc")

_thaw_at_exit = False  # registered once per process


def freeze_heap() -> None:
    """Collect everything start-up left, then freeze the survivors (what vLLM's server
    does once it is up). Logs how long that full collection took: the pause every
    oldest-generation collection would have cost without the freeze.

    The heap stays frozen for the life of the process: a server process exits when it
    stops serving, and where one process builds app after app (the tests) each later
    freeze only collects what is not frozen yet, which is cheap (thawing at every app
    shutdown made each next start-up a full collection: +30 s on the fast test tier).
    Thawed at exit, so that finalisation frees it: extensions built with nanobind (Triton)
    report every frozen object of theirs as a leak otherwise."""
    global _thaw_at_exit
    started = time.perf_counter()
    gc.collect()
    full_s = time.perf_counter() - started
    gc.freeze()
    if not _thaw_at_exit:
        atexit.register(gc.unfreeze)
        _thaw_at_exit = True
    log.info("gc.frozen", objects=gc.get_freeze_count(), full_collection_ms=round(full_s * 1e3, 1))


class GcPauses:
    """Times each collection into ``histogram`` (labelled by generation) while attached."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            pause = time.perf_counter() - self._started
            self._histogram.labels(str(info.get("generation", "?"))).observe(pause)

    def attach(self) -> None:
        gc.callbacks.append(self._callback)

    def detach(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
