"""The progress events the live view reads: each finished sample says which one and how
long it ran, a slow draw reports its samples' lengths while they grow, an adaptive
round's events are numbered in the whole pool, and a search step says per candidate what
the PRM scored, what the rule kept, pruned or resampled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from types import SimpleNamespace
from typing import Any

import pytest

from core.base import JSON
from core.engine import SampleDelta
from strategies import pool as pool_module
from strategies.pool import Draw, Pool, draw
from strategies.sampling.adaptive_draw import in_whole_pool
from strategies.search.paths import Path
from strategies.search.step_search import SearchState, step_tree


async def _deltas(pause_s: float) -> AsyncGenerator[SampleDelta, None]:
    for step in range(4):
        await asyncio.sleep(pause_s)
        yield SampleDelta(index=0, token_ids=(1, 2))
        yield SampleDelta(index=1, token_ids=(3,), finish_reason="stop" if step == 3 else None)
    yield SampleDelta(index=0, token_ids=(4,), finish_reason="length")


async def _events(pause_s: float) -> list[dict[str, Any]]:
    source = Draw(n=2, deltas=_deltas(pause_s), plan=None, mode="plain", engine_requests=1)
    pool = Pool(samples=[])
    return [dict(p.data) async for p in draw(source, pool)]


async def test_finished_samples_say_which_and_how_long() -> None:
    events = await _events(0.0)
    assert events == [
        {
            "samples_done": 1,
            "samples": 2,
            "sample": {"index": 1, "tokens": 4, "finish_reason": "stop"},
        },
        {
            "samples_done": 2,
            "samples": 2,
            "sample": {"index": 0, "tokens": 9, "finish_reason": "length"},
        },
    ]


async def test_a_slow_draw_reports_its_samples_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "GROWTH_EVERY_S", 0.02)
    events = await _events(0.03)
    growing = [e["growing"] for e in events if "growing" in e]
    assert growing, events
    assert all(len(g) == 2 for g in growing)
    assert growing == sorted(growing), "lengths only grow"
    assert [e["samples_done"] for e in events if "samples_done" in e] == [1, 2]


def test_an_adaptive_rounds_events_are_numbered_in_the_whole_pool() -> None:
    sample: JSON = {"index": 1, "tokens": 5, "finish_reason": "stop"}
    assert in_whole_pool({"samples_done": 2, "samples": 4, "sample": sample}, 8, 16) == {
        "samples_done": 10,
        "samples": 16,
        "sample": {"index": 9, "tokens": 5, "finish_reason": "stop"},
    }
    assert in_whole_pool({"growing": [3, 4], "samples": 2}, 8, 16) == {
        "growing": [3, 4],
        "samples": 16,
        "first": 8,
    }


def test_a_search_step_says_what_was_kept_pruned_and_resampled() -> None:
    ctx: Any = SimpleNamespace(
        engine=SimpleNamespace(
            tokens=SimpleNamespace(decode=lambda ids: "s" + "".join(map(str, ids)))
        )
    )
    a = Path(ids=(1,), steps=((1,),), rewards=(0.9,))
    b = Path(ids=(2,), steps=((2,),), rewards=(0.1,))
    c = Path(ids=(3,), steps=((3,),), rewards=(0.7,), state="closed")
    after = SearchState(live=(a, a), complete=(c,))  # a resampled twice, b pruned
    tree = step_tree(ctx, [[a, b], [c]], after)
    assert tree == [
        {"parent": 0, "reward": 0.9, "kept": 2, "finished": False, "text": "s1"},
        {"parent": 0, "reward": 0.1, "kept": 0, "finished": False, "text": "s2"},
        {"parent": 1, "reward": 0.7, "kept": 1, "finished": True, "text": "s3"},
    ]
