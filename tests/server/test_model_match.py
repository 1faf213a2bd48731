"""Which default resources belong to the served model (no engine: fake tokens)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

import testbed
from core.engine import ServedModel
from server.resources import model_match
from server.resources.pets import _table, made_for_served
from server.settings import Settings
from strategies.pets.table import DEFAULT_TABLE, PetsTable


@dataclass
class FakeServed:
    model_name: str


def engine(name: str) -> ServedModel:
    return cast(ServedModel, FakeServed(name))


def test_the_probe_tells_tokenizers_apart() -> None:
    chars = model_match.probe_ids(lambda text: [ord(c) for c in text])
    words = model_match.probe_ids(lambda text: [len(w) for w in text.split()])
    assert model_match.same_tokenizer(chars, chars)
    assert not model_match.same_tokenizer(chars, words)
    err = model_match.mismatch("reward_model", "/r", "/policy")
    assert "/r" in str(err) and "/policy" in str(err)


def test_the_testbed_tokenizer_reads_the_probe_like_the_reward_models() -> None:
    base = model_match.local_probe(testbed.model_path("base"))
    reward = model_match.local_probe(testbed.model_path("reward"))
    assert base == reward and len(base) > 20


def test_the_remote_probe_says_none_when_it_cannot_check() -> None:
    assert model_match.remote_probe("http://127.0.0.1:9", timeout_s=0.5) is None


def test_the_default_table_belongs_to_the_testbed_base_model_only(tmp_path: Path) -> None:
    table = PetsTable.load(DEFAULT_TABLE)
    made_for = table.calibration["model"]
    assert made_for == "testbed-base"
    testbed_default = Settings()
    assert made_for_served(made_for, testbed_default, engine("testbed-base"))
    by_dir = Settings(model=str(testbed.model_path("base")))
    assert made_for_served(made_for, by_dir, engine(by_dir.model_name))
    other = Settings(model=str(tmp_path / "smollm2"))
    assert not made_for_served(made_for, other, engine(other.model_name))
    assert not made_for_served(None, other, engine(other.model_name))


def test_a_default_table_for_another_model_is_left_out_a_named_one_is_kept(
    tmp_path: Path,
) -> None:
    other = Settings(model=str(tmp_path / "smollm2"))
    assert _table(other, engine(other.model_name)) is None
    named = Settings(model=str(tmp_path / "smollm2"), pets_table=str(DEFAULT_TABLE))
    assert _table(named, engine(named.model_name)) is not None
    with pytest.raises(RuntimeError, match="does not exist"):
        _table(Settings(pets_table=str(tmp_path / "nope.json")), engine("testbed-base"))
