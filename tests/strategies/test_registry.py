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


def test_body_options_of_thinkgate_are_strict_and_a_clients_own_are_ignored() -> None:
    registry = Registry()
    registry.register(Good)
    registry.register(_variant(name="wide", body_options=frozenset({"depth", "alhpa"})))
    assert registry.check_options("good", {"depth": 2}) == ()
    assert registry.check_options("good", {}) == ()
    # A client's or platform's own field (Codex's client_metadata): accepted, ignored.
    both = {"depth": 1, "colour": "red", "client_metadata": {}}
    assert registry.check_options("good", both) == ("client_metadata", "colour")
    with pytest.raises(InvalidRequest) as elsewhere:
        registry.check_options("good", {"alhpa": 0.1})
    assert elsewhere.value.param == "alhpa"
    assert "an option of wide, not of good" in str(elsewhere.value)
    with pytest.raises(InvalidRequest) as misspelt:
        registry.check_options("good", {"dpeth": 2})
    assert misspelt.value.param == "dpeth" and "did you mean 'depth'?" in str(misspelt.value)
    assert "options of good: depth" in str(misspelt.value)
    with pytest.raises(InvalidRequest, match="did you mean 'top_k'"):
        registry.check_options("good", {"top_kk": 2}, ours=("top_k",))
    with pytest.raises(InvalidRequest, match="did you mean 'budget'"):
        registry.check_options("good", {"budgets": {}})
    with pytest.raises(InvalidRequest, match="thinkgate's prefix") as prefixed:
        registry.check_options("good", {"thinkgate_mode": "x"})
    assert prefixed.value.param == "thinkgate_mode"


def test_installed_strategies_declare_the_options_they_read() -> None:
    registry = Registry()
    registry.load_entry_points()
    options = {name: registry.options_of(name) for name in registry.names()}
    assert options["best-of-majority"] >= {"alpha", "scorer", "vote", "elastic_mode"}
    assert "alpha" not in options["self-consistency"] and "scorer" not in options["pets"]
    assert options["plain"] == {"return_token_ids"}
    assert options["deepconf"] >= {"warmup", "variant", "consensus", "confidence_window"}
