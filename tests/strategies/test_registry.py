"""The strategy registry refuses plugins that break the contract, at registration."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, ClassVar

import pytest

from core.base import Result, StrategyContext, StrategyEvent, StrategyRequest, Usage
from core.engine import Engine
from core.errors import InvalidRequest, UnknownStrategy
from core.registry import PluginValidationError, Registry


class Good:
    name: ClassVar[str] = "good"
    budget_fields: ClassVar[frozenset[str]] = frozenset()
    body_options: ClassVar[frozenset[str]] = frozenset({"depth"})
    streams_live: ClassVar[bool] = False

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        return None

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[StrategyEvent, None]:
        yield Result(
            choices=(),
            usage=Usage(prompt_tokens=0, completion_tokens=0, reasoning_tokens=0),
            samples=0,
        )


def _variant(**attrs: Any) -> type:
    return type("Variant", (Good,), attrs)


def _not_a_generator(self: Any, ctx: StrategyContext) -> list[StrategyEvent]:
    return []


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (_variant(name=""), "has no class attribute 'name'"),
        (_variant(name=None), "has no class attribute 'name'"),
        (_variant(run=_not_a_generator), "run must be an async generator"),
        (_variant(budget_fields={"thinking"}), "budget_fields must be a frozenset"),
        (_variant(body_options=None), "body_options must be a frozenset of str"),
        (_variant(body_options=frozenset({1})), "body_options must be a frozenset of str"),
        (_variant(validate=None), "has no validate()"),
    ],
)
def test_contract_violations_are_refused(cls: type, message: str) -> None:
    with pytest.raises(
        PluginValidationError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        Registry().register(cls)


def test_entry_point_name_must_match_and_names_are_unique() -> None:
    registry = Registry()
    with pytest.raises(PluginValidationError, match="entry point 'other' loads"):
        registry.register(Good, name="other")
    registry.register(Good, name="good")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(Good)


def test_unknown_strategy_names_the_available_ones() -> None:
    registry = Registry()
    registry.register(Good)
    registry.instantiate()
    assert isinstance(registry.get("good"), Good)
    with pytest.raises(UnknownStrategy) as missing:
        registry.get("bad")
    assert missing.value.param == "strategy" and "available: good" in str(missing.value)


def test_installed_strategies_load_and_missing_ones_fail_start_up() -> None:
    registry = Registry()
    registry.load_entry_points()
    assert {"plain", "elastic", "self-consistency", "pets"} <= set(registry.names())
    with pytest.raises(RuntimeError, match=r"strategies not installed: \['nope'\]"):
        Registry().load_entry_points(allow={"plain", "nope"})


def test_body_options_outside_the_strategy_are_a_400_naming_the_field() -> None:
    registry = Registry()
    registry.register(Good)
    registry.register(_variant(name="wide", body_options=frozenset({"depth", "alhpa"})))
    registry.check_options("good", {"depth": 2})
    registry.check_options("good", {})
    with pytest.raises(InvalidRequest) as unknown:
        registry.check_options("good", {"depth": 1, "colour": "red"})
    assert unknown.value.param == "colour"
    assert "'colour'" in str(unknown.value) and "options of good: depth" in str(unknown.value)
    with pytest.raises(InvalidRequest) as elsewhere:
        registry.check_options("good", {"alhpa": 0.1})
    assert elsewhere.value.param == "alhpa"
    assert "an option of wide, not of good" in str(elsewhere.value)


def test_installed_strategies_declare_the_options_they_read() -> None:
    registry = Registry()
    registry.load_entry_points()
    options = {name: registry.options_of(name) for name in registry.names()}
    assert options["best-of-majority"] >= {"alpha", "scorer", "vote", "elastic_mode"}
    assert "alpha" not in options["self-consistency"] and "scorer" not in options["pets"]
    assert options["plain"] == {"return_token_ids"}
    assert options["deepconf"] >= {"warmup", "variant", "consensus", "confidence_window"}
