"""The training code runs end to end on tiny settings (CI never retrains the shipped models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from testbed.cli import ARITHMETIC_ATTEMPTS, BASE_RUNS, RUN_SEED_STRIDE, main
from testbed.data import encode_trace, variant_trace
from testbed.gate import GATE_PER_OPS
from testbed.reward import RewardSettings, train_reward
from testbed.tokenizer import CharCodec
from testbed.traces import cut_trace, make_trace
from testbed.train import (
    TrainResult,
    TrainSettings,
    native_bf16,
    resolve_precision,
    train_causal,
    weighted_lm_loss,
)


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


def test_cut_share_adds_forced_closes_to_base_without_shifting_share_zero() -> None:
    import random

    from testbed.tokenizer import THINK_END
    from testbed.traces import Trace

    def draw(share: float) -> list[Trace]:
        rng = random.Random(4)
        return [variant_trace("base", rng, thorough_share=0.1, cut_share=share) for _ in range(600)]

    assert draw(0.0) == [
        variant_trace("base", rng, thorough_share=0.1)
        for rng in [random.Random(4)]
        for _ in range(600)
    ]
    traces = draw(0.1)
    cut = [t for t in traces if t.forced_close]
    assert 0.06 < len(cut) / len(traces) < 0.14
    for t in cut:
        # Closed by the budget, then the right answer; the forced `</think>` carries no
        # loss (encode_trace), so base learns to answer after it, not to emit it there.
        assert t.completion.endswith(f"{THINK_END}\n\\boxed{{{t.question.answer}}}")
        codec = CharCodec()
        example = encode_trace(codec, t)
        assert example.ids.count(codec.think_end_id) == 1
        close = example.ids.index(codec.think_end_id)
        assert example.weights[close] == 0.0 and example.weights[close + 1] > 0.0


def test_step_positions_and_the_arithmetic_phase_stream() -> None:
    from testbed.data import example_stream, operand_offsets, result_offsets
    from testbed.task import Question, parse_prompt
    from testbed.traces import Trace

    assert result_offsets("3+8=1\ncheck 1-8=3\n1-5+7=3\n3+2=5\n", "step") == [4, 30]
    # The operators and operands lines copy from the question; check lines copy none.
    thinking = "3+8=1\ncheck 1-8=3\n1-5+7=3\n3+2"
    assert operand_offsets(thinking) == [1, 2, 19, 20, 21, 22]
    assert "".join(thinking[o] for o in operand_offsets(thinking)) == "+8-5+7"
    codec = CharCodec()
    trace = Trace(question=Question.from_expr("3+8-5+7"), thinking="3+8=1\n1-5+7=3\n")
    example = encode_trace(codec, trace)
    assert [codec.decode([example.ids[p]]) for p in example.step_positions] == ["1"]
    assert codec.decode([example.ids[p] for p in example.operand_positions]) == "+8-5+7"
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
        # Eager: compiling cost this test 70 s of a cold inductor cache on the 2-core CI
        # box, and could not fail it (a failed compile falls back to eager, train.py).
        TrainSettings(variant="base", max_steps=3, batch_size=4, minutes=1.0, compile=False),
        out,
        progress_bar=False,
    )
    # The one-minute cap counts from the end of the first step (which compiles the model
    # on the default path).
    assert result.steps == 3 and result.tokens > 0
    assert result.first_step_s is not None and 0 < result.first_step_s < result.wall_s
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json"):
        assert (out / name).exists(), name
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    assert config["head_dim"] == 64 and config["num_key_value_heads"] == 2
    # bf16 matmuls where the CPU has them natively.
    assert result.precision == ("bf16" if native_bf16() else "fp32")
    gen = json.loads((out / "generation_config.json").read_text())
    assert CharCodec().eos_id in gen["eos_token_id"]

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(out))
    ids = torch.tensor([[1, 2, 3]])
    assert model(input_ids=ids).logits.shape == (1, 3, CharCodec().vocab_size)

    elastic = tmp_path / "elastic"
    train_causal(
        TrainSettings(
            variant="elastic", max_steps=2, batch_size=4, init_from=str(out), compile=False
        ),
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
    assert r.best_step in (0, 1, 2) and r.as_dict()["best_step"] == r.best_step
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
            compile=False,
        )
        return train_causal(settings, tmp_path / "m", progress_bar=False)

    # A bar every model clears stops the phase as soon as the rule may look; one no model
    # clears runs to the step cap.
    early = steps(0.0)
    assert early.steps == MIN_STEPS_BEFORE_STOP
    assert early.step_result_prob is not None and 0.0 < early.step_result_prob < 1.0
    assert steps(1.01).steps == 80


def _small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 4: the CLI tests check the retry loop around training, which two steps
    of 48 long traces (the default) only slow (about 20 s a test on 2 cores)."""
    import testbed.train

    full = testbed.train.batches
    monkeypatch.setattr(
        testbed.train, "batches", lambda stream, size, *, seed: full(stream, 4, seed=seed)
    )


@pytest.mark.slow
def test_cli_train_writes_card(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import testbed.gate
    from testbed.gate import GATE_ACCURACY, GATE_MAX_OPS, GATE_MIN_OPS, GreedyCheck

    # The greedy check's verdict on an untrained model (vLLM, ~50 s a run) is tested on
    # its own (test_gate.py); here the retry loop around it: every run fails it.
    def failing_check(model_dir: Path, **_: object) -> GreedyCheck:
        assert (model_dir / "model.safetensors").exists()
        return GreedyCheck(
            questions=4 * GATE_PER_OPS,
            min_ops=GATE_MIN_OPS,
            max_ops=GATE_MAX_OPS,
            accuracy=0.02,
            bar=GATE_ACCURACY,
        )

    monkeypatch.setattr(testbed.gate, "greedy_check", failing_check)
    _small_batches(monkeypatch)
    rc = main(
        ["train", "--variant", "base", "--max-steps", "2", "--out", str(tmp_path), "--no-progress"]
        + ["--no-compile", "--precision", "fp32"]
    )
    assert rc == 0
    card = json.loads((tmp_path / "base" / "card.json").read_text())
    training = card["training"]
    phases = training["phases"]
    # Two steps learn nothing: every arithmetic attempt runs, each from a new seed, the
    # gate rejects the model and the whole run is done again from the next seed.
    assert len(phases) == BASE_RUNS * (ARITHMETIC_ATTEMPTS + 2)
    assert [p["run"] for p in phases] == [
        r for r in range(1, BASE_RUNS + 1) for _ in range(ARITHMETIC_ATTEMPTS + 2)
    ]
    *attempts, full, focus = [p for p in phases if p["run"] == 1]
    assert [p["phase"] for p in (*attempts, full, focus)][-3:] == ["arithmetic", "full", "focus"]
    assert [p["attempt"] for p in attempts] == list(range(1, ARITHMETIC_ATTEMPTS + 1))
    seeds = {p["settings"]["seed"] for p in phases if p["phase"] == "arithmetic"}
    assert len(seeds) == BASE_RUNS * ARITHMETIC_ATTEMPTS
    assert not any(p["learned"] for p in phases if p["phase"] == "arithmetic")
    err = capsys.readouterr().err
    assert f"warning: {ARITHMETIC_ATTEMPTS} arithmetic attempts ended" in err
    assert "warning: run 1 (seed 0) is right greedily on only" in err
    assert "training again from scratch" in err
    checks = training["checks"]
    assert [c["run"] for c in checks] == list(range(1, BASE_RUNS + 1))
    assert [c["seed"] for c in checks] == [RUN_SEED_STRIDE * r for r in range(BASE_RUNS)]
    assert all(not c["passed"] and c["accuracy"] < c["bar"] for c in checks)
    assert all(c["questions"] == 4 * GATE_PER_OPS for c in checks)
    # Every run rejected: the best is kept (ties go to the earlier run).
    accuracies = [c["accuracy"] for c in checks]
    assert training["kept_run"] == 1 + accuracies.index(max(accuracies))
    assert all(p["steps"] == 2 for p in phases)
    assert training["steps"] == 2 * len(phases)
    arithmetic = attempts[0]
    assert arithmetic["settings"]["init_from"] is None
    assert arithmetic["settings"]["small_share"] > 0 and arithmetic["settings"]["until_step_prob"]
    assert arithmetic["settings"]["step_weight"] > 1 and full["settings"]["step_weight"] == 1
    assert full["settings"]["small_share"] == 0 and full["settings"]["init_from"]
    assert full["settings"]["merge_weight"] > 1 and full["settings"]["thorough_share"] > 0
    assert full["settings"]["until_step_prob"] is None
    assert focus["settings"]["merge_weight"] > 1 and focus["settings"]["thorough_share"] > 0
    assert focus["settings"]["cut_share"] > 0 and full["settings"]["cut_share"] == 0
    assert focus["settings"]["lr"] < full["settings"]["lr"]
    assert card["model"] == "base"
    assert isinstance(card["host"]["native_bf16"], bool) and card["host"]["threads"] == 2
    # The command line's compute choices reach every phase, and the card says what ran.
    assert all(p["settings"]["compile"] is False for p in phases)
    assert all(p["precision"] == "fp32" for p in phases)
    assert all(0.0 < p["operand_prob_ema"] < 1.0 for p in phases)
    # The focus phase alone keeps the earlier records, replaces the last focus, and checks.
    rc = main(
        ["train", "--variant", "base-focus", "--max-steps", "3", "--out", str(tmp_path)]
        + ["--no-progress", "--no-compile"]
    )
    assert rc == 0
    again = json.loads((tmp_path / "base" / "card.json").read_text())["training"]
    # The weights went through every phase before, this one on top: all on the card.
    assert again["phases"][:-1] == phases
    assert again["phases"][-1]["phase"] == "focus" and again["phases"][-1]["steps"] == 3
    assert again["checks"][:-1] == checks and again["checks"][-1]["after"] == "focus"
    first, then = again["command"]
    assert first == training["command"] and "--variant base-focus" in then
    assert not again["checks"][-1]["passed"]


def test_precision_resolves_to_what_the_cpu_runs_natively() -> None:
    assert resolve_precision("fp32") == "fp32"
    assert resolve_precision("bf16") == "bf16"
    assert resolve_precision("auto") == ("bf16" if native_bf16() else "fp32")


def test_reward_training_keeps_the_weights_of_its_best_evaluation() -> None:
    from testbed.reward import BestWeights

    model = torch.nn.Linear(2, 1)
    best = BestWeights()
    weights = []
    for step, auc in enumerate([float("nan"), 0.6, 0.8, 0.7, float("nan")]):
        with torch.no_grad():
            model.weight.fill_(float(step))
        weights.append(model.weight.detach().clone())
        best.offer(step, auc, model)
    # Training went on to worse weights; the kept ones are step 2's, not the last step's.
    assert best.step == 2 and best.auroc == 0.8
    best.restore(model)
    assert torch.equal(model.weight, weights[2])
    # With nothing but NaN (one-class validation labels) the first weights stand.
    only_nan = BestWeights()
    for step in range(3):
        with torch.no_grad():
            model.weight.fill_(10.0 + step)
        only_nan.offer(step, float("nan"), model)
    only_nan.restore(model)
    assert only_nan.step == 0 and float(model.weight[0, 0].detach()) == 10.0


@pytest.mark.slow
def test_cli_keeps_the_best_run_when_the_gate_rejects_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import hashlib

    import testbed.gate
    from testbed.gate import GreedyCheck

    weights_at_check: list[str] = []
    accuracies = iter([0.5, 0.1])  # run 1 is the better one; run 2 is trained last

    def fake_check(model_dir: Path, **_: object) -> GreedyCheck:
        digest = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
        weights_at_check.append(digest)
        return GreedyCheck(questions=4, min_ops=9, max_ops=12, accuracy=next(accuracies), bar=0.9)

    monkeypatch.setattr(testbed.gate, "greedy_check", fake_check)
    _small_batches(monkeypatch)
    argv = ["train", "--variant", "base", "--max-steps", "2", "--out", str(tmp_path)]
    assert main([*argv, "--no-progress", "--no-compile", "--precision", "fp32"]) == 0
    base = tmp_path / "base"
    final = hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()
    assert len(weights_at_check) == BASE_RUNS == 2 and weights_at_check[0] != weights_at_check[1]
    assert final == weights_at_check[0]
    training = json.loads((base / "card.json").read_text())["training"]
    assert training["kept_run"] == 1
    assert "warning: keeping run 1, the best of them" in capsys.readouterr().err
