"""core.defaults: the default model comes from an installed provider (the testbed's
entry point), and a missing or malformed provider fails with a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import defaults
from server.settings import Settings
from testbed import model_path


@pytest.fixture
def fresh() -> Iterator[None]:
    defaults.installed.cache_clear()
    yield
    defaults.installed.cache_clear()


def test_the_testbed_is_the_installed_default(fresh: None) -> None:
    offered = defaults.installed()
    assert offered.model == str(model_path("base")) and offered.served_name == "testbed-base"
    assert offered.reward_model == str(model_path("reward")) and offered.max_model_len == 65536
    assert offered.effort_context == 512  # served long, trained (and its efforts sized) on 512
    assert offered.is_default_model(model_path("base") / ".." / "base")
    settings = Settings()
    assert (settings.model_path, settings.model_name) == (offered.model, "testbed-base")
    named = Settings(model="/somewhere/else")
    assert (named.model_path, named.model_name) == ("/somewhere/else", "/somewhere/else")


class _EntryPoint:
    def __init__(self, name: str, offer: Any) -> None:
        self.name, self.value, self._offer = name, f"pkg:{name}", offer

    def load(self) -> Any:
        return self._offer


def _providers(monkeypatch: pytest.MonkeyPatch, *eps: _EntryPoint) -> None:
    monkeypatch.setattr(defaults, "entry_points", lambda group: list(eps))


def test_without_a_provider_the_model_must_be_named(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _providers(monkeypatch)
    with pytest.raises(defaults.NoDefaultModel, match="no --model given"):
        defaults.installed()
    assert Settings(model="/m").model_path == "/m"  # named: no provider needed


def test_the_first_provider_by_name_wins_and_bad_offers_are_named(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _EntryPoint("a", lambda: {"model": Path("/a"), "served_name": "a"})
    b = _EntryPoint("b", {"model": "/b", "served_name": "b"})
    _providers(monkeypatch, b, a)
    assert defaults.installed() == defaults.ModelDefaults("/a", "a")
    for bad in ({"model": "/x"}, {"model": "/x", "served_name": "x", "max_model_len": "9"}, 5):
        defaults.installed.cache_clear()
        _providers(monkeypatch, _EntryPoint("c", bad))
        with pytest.raises(defaults.NoDefaultModel, match="pkg:c"):
            defaults.installed()


def test_calibration_questions_are_an_optional_path(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from testbed.defaults import CALIBRATION_QUESTIONS

    assert defaults.installed().calibration_questions == str(CALIBRATION_QUESTIONS)
    parse = defaults.ModelDefaults.parse
    assert parse({"model": "/m", "served_name": "m"}, "p").calibration_questions is None
    offered = parse({"model": "/m", "served_name": "m", "calibration_questions": Path("/q")}, "p")
    assert offered.calibration_questions == "/q"
    for bad in (5, "", ["/q"]):
        with pytest.raises(defaults.NoDefaultModel, match="p: 'calibration_questions'"):
            parse({"model": "/m", "served_name": "m", "calibration_questions": bad}, "p")
