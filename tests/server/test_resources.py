"""Resources are a typed plugin contract: builders found through the thinkgate.resources
entry points attach values under typed keys, checked at start-up (no engine needed)."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from core.base import Attached, ResourceKey, Resources
from server import resources
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
        async with resources.build_resources(Settings(), engine=None, builders=builders) as r:  # type: ignore[arg-type]
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
