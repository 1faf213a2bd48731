"""Resources are a typed plugin contract: builders found through the thinkgate.resources
entry points attach values under typed keys, checked at start-up (no engine needed)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from core.base import Attached, ResourceKey, Resources
from server.resources import builders as resources
from server.settings import Settings


@dataclass(frozen=True)
class Dictionary:
    words: tuple[str, ...]


WORDS = ResourceKey("test_words", Dictionary)
torn_down: list[str] = []


async def words_builder(settings: Settings, engine: Any, stack: AsyncExitStack) -> Attached:
    async def close() -> None:
        torn_down.append("words")

    stack.push_async_callback(close)
    return {WORDS: Dictionary(("a", "b"))}


async def wrong_type(settings: Settings, engine: Any, stack: AsyncExitStack) -> Attached:
    return {WORDS: ["not", "a", "dictionary"]}


def _build(builders: Any) -> Resources:
    async def go() -> Resources:
        async with resources.build_resources(Settings(), served=None, builders=builders) as r:  # type: ignore[arg-type]
            return r

    return asyncio.run(go())


def test_thinkgates_own_builders_are_entry_points() -> None:
    names = {b.__qualname__ for b in resources.installed_builders()}
    assert {"pets_resources", "sampling_resources"} <= names


def test_typed_get_and_teardown() -> None:
    torn_down.clear()
    got = _build([words_builder])
    assert got.get(WORDS) == Dictionary(("a", "b"))
    assert torn_down == ["words"]  # the stack closed when the server stopped
    assert got.get(ResourceKey("absent", Dictionary)) is None
    assert got.get(ResourceKey("test_words", int)) is None  # another kind under that name


def test_a_value_of_the_wrong_type_or_a_name_twice_fails_start_up() -> None:
    with pytest.raises(RuntimeError, match="must be a Dictionary, got list"):
        _build([wrong_type])
    with pytest.raises(RuntimeError, match="attached twice"):
        _build([words_builder, words_builder])


class _EntryPoint:
    def __init__(self, name: str, value: Any) -> None:
        self.name, self.value, self._value = name, f"thirdparty:{name}", value

    def load(self) -> Any:
        if isinstance(self._value, Exception):
            raise self._value
        return self._value


def test_a_third_party_builder_attaches_without_editing_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        resources, "entry_points", lambda group: [_EntryPoint("words", words_builder)]
    )
    assert _build(None).get(WORDS) == Dictionary(("a", "b"))
    monkeypatch.setattr(
        resources, "entry_points", lambda group: [_EntryPoint("bad", ImportError("no module"))]
    )
    with pytest.raises(RuntimeError, match="thirdparty:bad"):
        resources.installed_builders()


def test_builders_run_side_by_side() -> None:
    """Each of two builders waits for the other to have begun: one after the other they
    would wait forever (the PRM's and the reward model's engines start this way)."""
    began = {"a": asyncio.Event(), "b": asyncio.Event()}

    def waiting(me: str, other: str, key: ResourceKey[Any]) -> Any:
        async def build(settings: Settings, engine: Any, stack: AsyncExitStack) -> Attached:
            began[me].set()
            await asyncio.wait_for(began[other].wait(), 5)
            return {key: Dictionary((me,))}

        return build

    a, b = ResourceKey("side_a", Dictionary), ResourceKey("side_b", Dictionary)
    got = _build([waiting("a", "b", a), waiting("b", "a", b)])
    assert got.get(a) == Dictionary(("a",)) and got.get(b) == Dictionary(("b",))


def test_a_failing_builder_fails_start_up_with_its_own_error() -> None:
    async def broken(settings: Settings, engine: Any, stack: AsyncExitStack) -> Attached:
        raise RuntimeError("prm_model /x has no config.json")

    with pytest.raises(RuntimeError, match="no config.json"):  # not an ExceptionGroup
        _build([words_builder, broken])


def test_an_engine_started_in_a_thread_is_closed_if_start_up_is_cancelled() -> None:
    import threading

    from engines.local.launch import start_in_thread

    release = threading.Event()
    closed: list[str] = []

    class Engine:
        async def aclose(self) -> None:
            closed.append("engine")

    def start() -> Engine:
        release.wait(5)  # the engine's processes still importing
        return Engine()

    async def go() -> None:
        task = asyncio.ensure_future(start_in_thread(start))
        await asyncio.sleep(0.05)
        task.cancel()  # another builder failed
        await asyncio.sleep(0.05)
        assert not task.done()  # it waits for the start instead of orphaning it
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert closed == ["engine"]
