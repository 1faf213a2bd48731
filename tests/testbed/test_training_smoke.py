"""The training code runs end to end on tiny settings (CI never retrains the shipped models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from testbed.cli import ARITHMETIC_ATTEMPTS, main
from testbed.data import encode_trace, variant_trace
from testbed.reward import RewardSettings, train_reward
from testbed.tokenizer import CharCodec
from testbed.traces import cut_trace, make_trace
from testbed.train import TrainResult, TrainSettings, train_causal, weighted_lm_loss


def test_loss_weights_cover_the_completion_only() -> None:
    import random

    from testbed.task import Question

    codec = CharCodec()
    q = Question.from_expr("3+8")
    full = encode_trace(codec, make_trace(q, random.Random(0)))
    first = full.weights.index(1.0)
    # The first trained token is the first thinking token, right after `<think>\n`.
    assert codec.decode(list(full.ids[:first])).endswith("<think>\n")
    assert full.ids[-1] == codec.eos_id and full.weights[-1] == 1.0
    cut = encode_trace(codec, cut_trace(make_trace(q, random.Random(0)), random.Random(5)))
    close = cut.ids.index(codec.think_end_id)
    assert cut.weights[close] == 0.0  # forced by the budget, not learned
    assert all(w == 1.0 for w in cut.weights[close + 1 :])


def test_merge_weight_lands_on_merged_result_digits_only() -> None:
    import random

    from testbed.data import merged_result_offsets
    from testbed.task import Question
    from testbed.traces import Trace

    assert merged_result_offsets("3+8=1\n1-5+7=3\ncheck 3-7=6\n") == [12]
    assert merged_result_offsets("3+8=1\n1-5+") == []  # cut mid-line: nothing to weigh
    codec = CharCodec()
    trace = Trace(question=Question.from_expr("3+8-5+7"), thinking="3+8=1\n1-5+7=3\n")
    example = encode_trace(codec, trace, merge_weight=8.0)
    heavy = [i for i, w in enumerate(example.weights) if w == 8.0]
    assert heavy == list(example.merged_positions) and len(heavy) == 1
    assert codec.decode([example.ids[heavy[0]]]) == "3"
    assert codec.decode(list(example.ids[heavy[0] - 6 : heavy[0]])) == "1-5+7="
    plain = encode_trace(codec, trace)
    assert set(plain.weights) <= {0.0, 1.0} and plain.merged_positions == example.merged_positions
    # Merged lines appear at their training rate, so every batch of base has some.
    rng = random.Random(0)
    traces = [variant_trace("base", rng) for _ in range(200)]
    assert sum(len(merged_result_offsets(t.thinking)) for t in traces) > 100


def test_thorough_share_adds_fully_checked_traces_without_shifting_share_zero() -> None:
    import random

    from testbed.traces import Trace, classify_line

    def draw(share: float | None) -> list[Trace]:
        rng = random.Random(3)
        if share is None:
            return [variant_trace("base", rng) for _ in range(300)]
        return [variant_trace("base", rng, thorough_share=share) for _ in range(300)]

    def fully_checked(trace: Trace) -> bool:
        kinds = [classify_line(line) for line in trace.thinking.splitlines()]
        return "merged" not in kinds and kinds.count("check") == kinds.count("step")

    default = draw(None)
    assert draw(0.0) == default  # the first phase's example stream is unchanged
    before = sum(map(fully_checked, default)) / len(default)
    after = sum(map(fully_checked, draw(0.5))) / len(default)
    assert after > before + 0.3, (before, after)


def test_step_positions_and_the_arithmetic_phase_stream() -> None:
    from testbed.data import example_stream, result_offsets
    from testbed.task import Question, parse_prompt
    from testbed.traces import Trace

    assert result_offsets("3+8=1\ncheck 1-8=3\n1-5+7=3\n3+2=5\n", "step") == [4, 30]
    codec = CharCodec()
    trace = Trace(question=Question.from_expr("3+8-5+7"), thinking="3+8=1\n1-5+7=3\n")
    example = encode_trace(codec, trace)
    assert [codec.decode([example.ids[p]]) for p in example.step_positions] == ["1"]
    assert codec.decode(list(example.ids[example.step_positions[0] - 4 :][:5])) == "3+8=1"
    weighted = encode_trace(codec, trace, step_weight=8.0, merge_weight=4.0)
    heavy = {i: w for i, w in enumerate(weighted.weights) if w > 1.0}
    assert heavy == {example.step_positions[0]: 8.0, example.merged_positions[0]: 4.0}

    # The arithmetic phase draws half its right operands from 0-2; the default stream's
    # stay uniform, and a share of 0 leaves that stream as it was.
    def right_operands(share: float | None) -> list[int]:
        if share is None:
            stream = example_stream(codec, "base", seed=0)
        else:
            stream = example_stream(codec, "base", seed=0, small_share=share)
        exprs = [parse_prompt(codec.decode(list(next(stream).ids))) for _ in range(300)]
        return [int(e[i]) for e in exprs for i in range(2, len(e), 2)]

    uniform = right_operands(None)
    assert right_operands(0.0) == uniform
    small = right_operands(0.5)
    assert sum(d <= 2 for d in uniform) / len(uniform) < 0.4
    assert sum(d <= 2 for d in small) / len(small) == pytest.approx(0.5 + 0.5 * 0.3, abs=0.05)
    assert sum(d == 0 for d in small) > sum(d == 1 for d in small)


def test_constant_rate_holds_after_warm_up() -> None:
    from testbed.train import lr_factor

    assert lr_factor(0.9, 500, 100, constant=True) == 1.0
    assert lr_factor(0.0, 49, 100, constant=True) == 0.5
    assert lr_factor(1.0, 500, 100) == pytest.approx(0.1)


def test_weighted_loss_ignores_zero_weight_tokens() -> None:
    ids = torch.tensor([[1, 2, 3]])
    logits = torch.zeros(1, 3, 5)
    logits[0, 0, 2] = 10.0  # predicts token 2 well; token 3 prediction is uniform
    w_first = torch.tensor([[0.0, 1.0, 0.0]])
    w_both = torch.tensor([[0.0, 1.0, 1.0]])
    assert weighted_lm_loss(logits, ids, w_first) < weighted_lm_loss(logits, ids, w_both)


def test_elastic_mixture_has_concise_and_cut_traces() -> None:
    import random

    rng = random.Random(0)
    traces = [variant_trace("elastic", rng) for _ in range(400)]
    cut = sum(t.forced_close for t in traces) / len(traces)
    checks = sum(t.thinking.count("check") for t in traces)
    steps = sum(t.question.ops for t in traces)
    assert 0.15 < cut < 0.35
    assert checks / steps < 0.3


@pytest.mark.slow
def test_train_and_export_smoke(tmp_path: Path) -> None:
    out = tmp_path / "base"
    result = train_causal(
        TrainSettings(variant="base", max_steps=3, batch_size=4, minutes=1.0),
        out,
        progress_bar=False,
    )
    assert result.steps == 3 and result.tokens > 0
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (out / name).exists(), name
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    assert config["head_dim"] == 64 and config["num_key_value_heads"] == 1
    gen = json.loads((out / "generation_config.json").read_text())
    assert CharCodec().eos_id in gen["eos_token_id"]

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(out))
    ids = torch.tensor([[1, 2, 3]])
    assert model(input_ids=ids).logits.shape == (1, 3, CharCodec().vocab_size)

    elastic = tmp_path / "elastic"
    train_causal(
        TrainSettings(variant="elastic", max_steps=2, batch_size=4, init_from=str(out)),
        elastic,
        progress_bar=False,
    )
    assert (elastic / "model.safetensors").exists()

    reward = tmp_path / "reward"
    r = train_reward(
        RewardSettings(
            base=str(out),
            sampler="hf",
            train_questions=3,
            val_questions=3,
            samples_per_question=2,
            max_steps=2,
            eval_every=1,
            target_auroc=1.1,
        ),
        reward,
        progress_bar=False,
    )
    assert r.steps == 2 and r.train_responses == 6
    rconfig = json.loads((reward / "config.json").read_text())
    assert rconfig["architectures"] == ["Qwen2ForSequenceClassification"]
    assert rconfig["num_labels"] == 1 if "num_labels" in rconfig else len(rconfig["id2label"]) == 1


@pytest.mark.slow
def test_arithmetic_phase_stops_once_step_lines_are_learned(tmp_path: Path) -> None:
    from testbed.train import MIN_STEPS_BEFORE_STOP

    def steps(until: float | None) -> TrainResult:
        settings = TrainSettings(
            variant="base",
            max_steps=80,
            batch_size=4,
            constant_lr=True,
            until_step_prob=until,
        )
        return train_causal(settings, tmp_path / "m", progress_bar=False)

    # A bar every model clears stops the phase as soon as the rule may look; one no model
    # clears runs to the step cap.
    early = steps(0.0)
    assert early.steps == MIN_STEPS_BEFORE_STOP
    assert early.step_result_prob is not None and 0.0 < early.step_result_prob < 1.0
    assert steps(1.01).steps == 80


@pytest.mark.slow
def test_cli_train_writes_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["train", "--variant", "base", "--max-steps", "2", "--out", str(tmp_path), "--no-progress"]
    )
    assert rc == 0
    card = json.loads((tmp_path / "base" / "card.json").read_text())
    *attempts, full, focus = card["training"]["phases"]
    # Two steps learn no arithmetic: every attempt runs, each from a new seed, and the
    # card says none learned.
    assert len(attempts) == ARITHMETIC_ATTEMPTS
    assert [p["phase"] for p in (*attempts, full, focus)][-3:] == ["arithmetic", "full", "focus"]
    assert [p["attempt"] for p in attempts] == list(range(1, ARITHMETIC_ATTEMPTS + 1))
    assert len({p["settings"]["seed"] for p in attempts}) == ARITHMETIC_ATTEMPTS
    assert not any(p["learned"] for p in attempts)
    assert f"warning: {ARITHMETIC_ATTEMPTS} arithmetic attempts ended" in capsys.readouterr().err
    assert all(p["steps"] == 2 for p in card["training"]["phases"])
    assert card["training"]["steps"] == 2 * (ARITHMETIC_ATTEMPTS + 2)
    arithmetic = attempts[0]
    assert arithmetic["settings"]["init_from"] is None
    assert arithmetic["settings"]["small_share"] > 0 and arithmetic["settings"]["until_step_prob"]
    assert arithmetic["settings"]["step_weight"] > 1 and full["settings"]["step_weight"] == 1
    assert full["settings"]["small_share"] == 0 and full["settings"]["init_from"]
    assert full["settings"]["merge_weight"] == 1 and full["settings"]["until_step_prob"] is None
    assert focus["settings"]["merge_weight"] > 1 and focus["settings"]["thorough_share"] > 0
    assert card["model"] == "base"
    # The focus phase alone keeps the first phases' records and replaces the last.
    rc = main(
        ["train", "--variant", "base-focus", "--max-steps", "3", "--out", str(tmp_path)]
        + ["--no-progress"]
    )
    assert rc == 0
    card = json.loads((tmp_path / "base" / "card.json").read_text())
    assert [p["steps"] for p in card["training"]["phases"]] == [2] * (ARITHMETIC_ATTEMPTS + 1) + [3]


def test_focus_records_of_old_cards_are_recognised() -> None:
    from testbed.cli import _is_focus

    # Cards written before phases had names: the focus record is the one with a merge weight.
    assert _is_focus({"settings": {"merge_weight": 8.0}})
    assert not _is_focus({"settings": {"merge_weight": 1.0, "init_from": None}})
    assert not _is_focus({"settings": {"init_from": None}})
    assert _is_focus({"phase": "focus"}) and not _is_focus({"phase": "full"})
