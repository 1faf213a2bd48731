"""server/process/gc_pauses: the start-up heap is frozen once the app is up, and collections are
timed into /metrics (the fast tier: a scripted engine, no vLLM)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

from server.process.gc_pauses import GcPauses


def _count(registry: CollectorRegistry, generation: str) -> float:
    value = registry.get_sample_value("pauses_count", {"generation": generation})
    return value or 0.0


def test_each_collection_is_timed_by_generation_while_attached() -> None:
    registry = CollectorRegistry()
    pauses = GcPauses(Histogram("pauses", "", ["generation"], registry=registry))
    pauses.attach()
    try:
        gc.collect()
        gc.collect(0)
    finally:
        pauses.detach()
    assert _count(registry, "2") == 1 and _count(registry, "0") >= 1
    gc.collect()
    assert _count(registry, "2") == 1  # detached: not timed


async def test_the_app_freezes_its_start_up_heap_and_reports_pauses(
    scripted_app: Callable[..., Any],
) -> None:
    gc.unfreeze()  # whatever an earlier app of this process froze
    assert gc.get_freeze_count() == 0
    async with scripted_app(lambda request: []) as app:
        assert gc.get_freeze_count() > 0
        gc.collect(0)
        text = (await app.client.get("/metrics")).text
    assert 'thinkgate_gc_pause_seconds_count{generation="0"}' in text
    # Left frozen for the process (thawed at exit): the next app's freeze is cheap.
    assert gc.get_freeze_count() > 0
