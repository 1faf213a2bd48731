"""Changing the PRM's recipe from the command line, and continuing a trained PRM."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from testbed import model_path
from testbed.cli import prm_settings_with
from testbed.prm import PrmSettings, load_net


def test_prm_set_reads_each_value_as_its_fields_type() -> None:
    base = PrmSettings(base="b")
    got = prm_settings_with(
        base, ["init=testbed/models/prm", "min_ops=10", "lr=5e-4", "truncate=false"]
    )
    assert (got.init, got.min_ops, got.lr, got.truncate) == ("testbed/models/prm", 10, 5e-4, False)
    assert prm_settings_with(got, ["init=none"]).init is None
    assert prm_settings_with(base, []) == base


@pytest.mark.parametrize("bad", ["nonsense=1", "min_ops", "min_ops=ten", "truncate=maybe"])
def test_prm_set_refuses_an_unknown_field_or_a_bad_value(bad: str) -> None:
    with pytest.raises(SystemExit, match="--prm-set"):
        prm_settings_with(PrmSettings(base="b"), [bad])


def test_a_prm_continued_from_an_export_starts_with_its_weights() -> None:
    prm = model_path("prm")
    net = load_net(str(model_path("base")), seed=0, extra_layers=2, init=str(prm))
    exported = load_file(str(prm / "model.safetensors"))
    state = net.state_dict()
    assert set(state) == set(exported)
    assert all(torch.equal(state[k], exported[k]) for k in exported)
    fresh = load_net(str(model_path("base")), seed=0, extra_layers=2)
    assert not torch.equal(fresh.state_dict()["score.2.weight"], exported["score.2.weight"])
