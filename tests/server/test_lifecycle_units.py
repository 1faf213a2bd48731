"""The lifecycle's logic without an engine: drain timing, abort, death policies.

The end-to-end versions (real vLLM, real signals) are in test_lifecycle.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest

from core.errors import BackendUnavailable
from engines.local.supervised import SupervisedEngine
from server.process.lifecycle import ENGINE_DEAD_EXIT, Lifecycle


async def test_drain_waits_for_in_flight_then_stops_without_aborting() -> None:
    inflight = [2]
    stopped = asyncio.Event()
    life = Lifecycle(drain_timeout_s=5, retry_after_s=3)
    life.bind_stop(stopped.set)
    life.bind_loop(asyncio.get_running_loop(), lambda: inflight[0])
    assert life.request_drain()
    assert not life.request_drain()  # a second signal: the caller stops at once
    with pytest.raises(BackendUnavailable) as refused:
        life.check_admission()
    assert refused.value.retry_after_s == 3 and refused.value.code == "shutting_down"
    await asyncio.sleep(0.2)
    assert not stopped.is_set()
    inflight[0] = 0
    await asyncio.wait_for(stopped.wait(), 2)
    assert not life.aborting.done()  # everything finished in time: nothing aborted
    assert life.exit_code == 0


async def test_drain_time_up_aborts_what_is_left() -> None:
    inflight = [1]
    stopped = asyncio.Event()
    life = Lifecycle(drain_timeout_s=0.2, retry_after_s=1)
    life.bind_stop(stopped.set)
    life.bind_loop(asyncio.get_running_loop(), lambda: inflight[0])
    life.request_drain()
    await asyncio.wait_for(life.aborting, 2)
    inflight[0] = 0  # the aborted request answered
    await asyncio.wait_for(stopped.wait(), 2)
    assert life.exit_code == 0


async def test_drain_aborts_early_enough_to_exit_within_the_timeout() -> None:
    # 30 s: in-flight work runs 23 s, the last 7 s are kept for aborting and stopping.
    assert Lifecycle(drain_timeout_s=30, retry_after_s=1).teardown_reserve_s == 7.0
    assert Lifecycle(drain_timeout_s=60, retry_after_s=1).teardown_reserve_s == 7.0
    assert Lifecycle(drain_timeout_s=10, retry_after_s=1).teardown_reserve_s == 5.0  # half
    assert Lifecycle(drain_timeout_s=2, retry_after_s=1).teardown_reserve_s == 1.0  # half
    inflight = [1]  # never finishes by itself
    stopped = asyncio.Event()
    life = Lifecycle(drain_timeout_s=0.8, retry_after_s=1)
    life.bind_stop(stopped.set)
    life.bind_loop(asyncio.get_running_loop(), lambda: inflight[0])
    t0 = time.monotonic()
    life.request_drain()
    await asyncio.wait_for(life.aborting, 2)
    aborted_s = time.monotonic() - t0
    assert 0.35 <= aborted_s < 0.6, aborted_s  # at 0.4 s (0.8 less half), not 0.8
    await asyncio.wait_for(stopped.wait(), 2)  # the request never answers: stop anyway
    assert time.monotonic() - t0 < 0.8  # the settle wait is half the reserve: 0.6 s


async def test_engine_death_exit_code() -> None:
    stopped = asyncio.Event()
    life = Lifecycle(drain_timeout_s=1, retry_after_s=1)
    life.bind_stop(stopped.set)
    life.bind_loop(asyncio.get_running_loop(), lambda: 0)
    life.fail()
    await asyncio.wait_for(stopped.wait(), 2)
    assert life.exit_code == ENGINE_DEAD_EXIT == 4
    assert life.state == "engine_dead"


class FakeEngine:
    """Just what SupervisedEngine reads of a LocalEngine."""

    def __init__(self) -> None:
        self.model_name = "m"
        self.tokens: Any = None
        self.max_model_len = 16
        self.processors = frozenset({"elastic"})
        self.dead = False
        self.closed = False

    async def health(self) -> None:
        if self.dead:
            raise BackendUnavailable("dead")

    def num_unfinished(self) -> int:
        return 0

    async def aclose(self) -> None:
        self.closed = True


async def test_exit_policy_calls_on_exit_once() -> None:
    first = FakeEngine()
    exits: list[bool] = []
    sup = SupervisedEngine(
        cast(Any, first),
        policy="exit",
        start=lambda: cast(Any, FakeEngine()),
        on_exit=lambda: exits.append(True),
    )
    sup.watch()
    first.dead = True
    for _ in range(40):
        if exits:
            break
        await asyncio.sleep(0.05)
    assert exits == [True] and sup.deaths == 1 and sup.restarts == 0
    await sup.aclose()


async def test_restart_policy_swaps_in_a_new_engine() -> None:
    first, second = FakeEngine(), FakeEngine()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    def start() -> Any:
        loop.call_soon_threadsafe(started.set)
        return second

    sup = SupervisedEngine(cast(Any, first), policy="restart", start=start, on_exit=lambda: None)
    sup.watch()
    first.dead = True
    # At once, before the watcher's next poll: restarting (a 503 with Retry-After for
    # requests), never dead for good (/health must not ask for the process to be replaced).
    assert sup.restarting and not sup.dead
    with pytest.raises(BackendUnavailable):
        await sup.health()
    await asyncio.wait_for(started.wait(), 5)
    for _ in range(40):
        if sup.restarts:
            break
        await asyncio.sleep(0.05)
    assert sup.restarts == 1 and sup.deaths == 1 and first.closed
    assert not sup.restarting and not sup.dead
    await sup.health()  # the new engine serves
    await sup.aclose()
    assert second.closed
