"""`python -m testbed train --variant prm` in miniature: sampling with transformers (no
vLLM), a few steps from the shipped `base`, and the export vLLM loads as
`Qwen2ForProcessRewardModel` (its weights under vLLM's names)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file

from testbed import model_path
from testbed.prm import PrmSettings, train_prm


@pytest.mark.slow
def test_prm_training_smoke_exports_vllms_layout(tmp_path: Path) -> None:
    out = tmp_path / "prm"
    r = train_prm(
        PrmSettings(
            base=str(model_path("base")),
            sampler="hf",
            train_questions=4,
            val_questions=3,
            samples_per_question=2,
            max_steps=2,
            eval_every=1,
            batch_size=4,
            expected_op_weight=1.0,  # the exact-operation probe's loss runs too (not exported)
            remaining_weight=1.0,  # and the operations-left one
        ),
        out,
        progress_bar=False,
    )
    assert r.steps == 2 and r.train_trajectories == 8 and r.val_trajectories == 6
    assert r.train_steps_labeled > r.train_trajectories  # several lines each
    assert r.best_step in (0, 1, 2) and len(r.val_curve) == 3
    assert math.isnan(r.val_first_error_auroc) or 0.0 <= r.val_first_error_auroc <= 1.0
    assert r.as_dict()["wall_s"] == round(r.wall_s, 1)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForProcessRewardModel"]
    assert config["num_labels"] == 2 and config["step_tag_id"] == 47
    names = set(load_file(str(out / "model.safetensors")))
    assert {"score.0.weight", "score.0.bias", "score.2.weight", "score.2.bias"} <= names
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    assert load_file(str(out / "model.safetensors"))["score.2.weight"].shape == (2, 128)
    # base's four layers and the two added on top (PrmSettings.extra_layers)
    assert config["num_hidden_layers"] == 6 and len(config["layer_types"]) == 6
    assert "model.layers.5.self_attn.o_proj.weight" in names
    assert (out / "tokenizer.json").exists()
