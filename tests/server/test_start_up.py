"""The engine and the resources at start-up (server.resources.start_up): side by side on a CPU host,
with a failure of either stopping the other, and torn down resources first. The engine
here is a stand-in that takes its time to start; the live servers of the slow tier start
the real ones this way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from core.base import Attached, ResourceKey
from core.engine import ServedModel
from server.resources import start_up
from server.settings import Settings

ENGINE_KEY = ResourceKey("test_engine_seen", object)
NAME_KEY = ResourceKey("test_name_seen", str)


class Recorder:
    def __init__(self, *, engine_fails: bool = False, start_s: float = 0.2) -> None:
        self.events: list[str] = []
        self.engine = SimpleNamespace(model_name="served", tokens="tokens", max_model_len=64)
        self.engine_fails = engine_fails
        self.start_s = start_s

    def opener(self, settings: Any, *, on_exit: Any, tokens: Any = None) -> Any:
        @asynccontextmanager
        async def open_engine() -> AsyncIterator[Any]:
            self.events.append(f"engine starting (tokens {tokens})")
            try:
                await asyncio.sleep(self.start_s)
            except asyncio.CancelledError:
                self.events.append("engine start cancelled")
                raise
            if self.engine_fails:
                raise RuntimeError("the engine did not start")
            self.events.append("engine up")
            try:
                yield self.engine
            finally:
                self.events.append("engine closed")

        return open_engine()

    async def name_builder(
        self, settings: Settings, served: ServedModel, stack: AsyncExitStack
    ) -> Attached:
        self.events.append(f"names built for {served.model_name}")

        async def close() -> None:
            self.events.append("names closed")

        stack.push_async_callback(close)
        return {NAME_KEY: served.model_name}

    async def engine_builder(
        self, settings: Settings, served: ServedModel, stack: AsyncExitStack
    ) -> Attached:
        engine = await served.engine()
        self.events.append("jobs built on the engine")
        return {ENGINE_KEY: engine}


async def failing_builder(
    settings: Settings, served: ServedModel, stack: AsyncExitStack
) -> Attached:
    await asyncio.sleep(0.05)
    raise RuntimeError("prm_model has another tokenizer")


def _on_cpu(monkeypatch: pytest.MonkeyPatch, rec: Recorder, *, cpu: bool = True) -> None:
    monkeypatch.setattr(start_up, "open_engine", rec.opener)
    monkeypatch.setattr(start_up, "tokenizer_before_start", lambda s: "tok" if cpu else None)


async def test_on_a_cpu_host_the_resources_start_beside_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = Recorder()
    _on_cpu(monkeypatch, rec)
    async with AsyncExitStack() as stack:
        engine, resources = await start_up.start_engine_and_resources(
            Settings(),
            None,
            stack,
            on_exit=lambda: None,
            builders=[rec.name_builder, rec.engine_builder],
        )
        assert engine is rec.engine
        assert resources.get(ENGINE_KEY) is rec.engine  # the builder that awaited it
        assert resources.get(NAME_KEY) == Settings().model_name
        # Built while the engine was starting, with the tokenizer loaded once for both.
        assert rec.events.index(f"names built for {Settings().model_name}") < rec.events.index(
            "engine up"
        )
        assert rec.events[0] == "engine starting (tokens tok)"
        assert rec.events.index("jobs built on the engine") > rec.events.index("engine up")
    assert rec.events[-2:] == ["names closed", "engine closed"]  # resources first


async def test_elsewhere_the_engine_is_up_before_the_resources(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = Recorder()
    _on_cpu(monkeypatch, rec, cpu=False)
    async with AsyncExitStack() as stack:
        await start_up.start_engine_and_resources(
            Settings(), None, stack, on_exit=lambda: None, builders=[rec.name_builder]
        )
        assert rec.events == [
            "engine starting (tokens None)",
            "engine up",
            "names built for served",
        ]
    assert rec.events[-2:] == ["names closed", "engine closed"]


async def test_an_engine_that_fails_to_start_stops_a_builder_waiting_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = Recorder(engine_fails=True)
    _on_cpu(monkeypatch, rec)
    with pytest.raises(RuntimeError, match="the engine did not start"):
        async with AsyncExitStack() as stack:
            await start_up.start_engine_and_resources(
                Settings(),
                None,
                stack,
                on_exit=lambda: None,
                builders=[rec.name_builder, rec.engine_builder],
            )
    assert "jobs built on the engine" not in rec.events
    assert "names closed" in rec.events  # what was built is torn down


async def test_a_builder_that_fails_stops_the_engine_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rec = Recorder(start_s=5.0)
    _on_cpu(monkeypatch, rec)
    with pytest.raises(RuntimeError, match="another tokenizer"):
        async with AsyncExitStack() as stack:
            await asyncio.wait_for(
                start_up.start_engine_and_resources(
                    Settings(), None, stack, on_exit=lambda: None, builders=[failing_builder]
                ),
                timeout=2.0,  # not the engine's whole start
            )
    assert rec.events == ["engine starting (tokens tok)", "engine start cancelled"]


async def test_an_engine_passed_in_is_the_callers() -> None:
    rec = Recorder()
    async with AsyncExitStack() as stack:
        engine, resources = await start_up.start_engine_and_resources(
            Settings(),
            rec.engine,
            stack,
            on_exit=lambda: None,
            builders=[rec.engine_builder],
        )
        assert engine is rec.engine and resources.get(ENGINE_KEY) is rec.engine
    assert "engine closed" not in rec.events


def test_the_tokenizer_comes_before_the_start_only_for_the_local_engine() -> None:
    assert (
        start_up.tokenizer_before_start(Settings(engine="remote", vllm_urls=("http://x:1",)))
        is None
    )
