"""One spec per logits processor (kernels/processors.py): each names classes that load
and answer to its name on both runner interfaces, a probe its own validation refuses by
its opt-in key, and the model set-up keeps a wrapped processor only where the model
ships what the wrapper reads."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import testbed
from kernels.guidance import plugin as bg_plugin
from kernels.processors import (
    BY_NAME,
    DEFAULT,
    SPECS,
    ModelSetup,
    model_setup,
    spec_for,
    wanted_by,
)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("runner", ["v1", "v2"])
def test_each_spec_names_classes_that_answer_to_its_name(spec: object, runner: str) -> None:
    from engines.local.engine import processor_name

    path = spec_for(spec.name, runner)  # type: ignore[attr-defined, arg-type]
    module, _, attr = path.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    assert processor_name(cls) == spec.name  # type: ignore[attr-defined]


def test_each_probe_carries_its_opt_in_key_and_is_routed_to_it() -> None:
    for spec in SPECS:
        assert spec.opt_in in spec.probe
        assert wanted_by(spec.probe) == {spec.name}
    assert wanted_by({}) == frozenset()
    assert DEFAULT == tuple(BY_NAME) == ("confidence", "elastic", "guidance")


def test_unknown_short_names_fail_and_class_specs_pass_through() -> None:
    assert spec_for("pkg.mod:Cls", "v1") == "pkg.mod:Cls"
    with pytest.raises(ValueError, match="unknown logits processor 'nope'"):
        spec_for("nope", "v2")


def test_a_wrapped_processor_only_with_a_model_that_ships_its_predictor(
    tmp_path: Path,
) -> None:
    base = model_setup(DEFAULT, str(testbed.model_path("base")))
    assert base.names == DEFAULT and base.dropped == ()
    assert base.hf_overrides == {"architectures": [bg_plugin.ARCHITECTURE]}
    bare = model_setup(DEFAULT, str(tmp_path))
    assert bare == ModelSetup(
        names=("confidence", "elastic"), hf_overrides={}, dropped=("guidance",)
    )
    # A processor named by class is kept as given (its needs are its own business).
    assert model_setup(["pkg.mod:Cls"], str(tmp_path)).names == ("pkg.mod:Cls",)


def test_a_profiles_predictor_is_named_to_the_wrapper_in_place_of_the_models(
    tmp_path: Path,
) -> None:
    import shutil

    from kernels.guidance.predictor import PREDICTOR_DIR

    profile = tmp_path / "profile"
    shutil.copytree(testbed.model_path("base") / PREDICTOR_DIR, profile / PREDICTOR_DIR)
    bare = tmp_path / "bare"
    bare.mkdir()
    # A model without a predictor of its own guides with the profile's.
    setup = model_setup(DEFAULT, str(bare), str(profile))
    assert setup.names == DEFAULT and setup.dropped == ()
    assert setup.hf_overrides == {
        "architectures": [bg_plugin.ARCHITECTURE],
        bg_plugin.HOME_KEY: str(profile),
    }
    # A profile without one leaves the model's own (or none) as before.
    assert model_setup(DEFAULT, str(bare), str(tmp_path / "empty")).dropped == ("guidance",)
    base = model_setup(DEFAULT, str(testbed.model_path("base")), str(tmp_path / "empty"))
    assert base.hf_overrides == {"architectures": [bg_plugin.ARCHITECTURE]}
