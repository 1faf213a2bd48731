"""The budget predictor: NLL, targets, token facts, files, and that training learns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributions import Gamma

from kernels.guidance.predictor import (
    BudgetPredictor,
    PredictorConfig,
    activate,
    boundary_token_ids,
    gamma_nll,
    has_predictor,
    inverse_softplus,
    load_config,
    load_predictor,
    remaining_lengths,
    save_predictor,
)
from testbed.predictor_cli import Features, evaluate, resolve_tokens, train

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "testbed" / "models" / "base"


def _config(**kw: Any) -> PredictorConfig:
    base: dict[str, Any] = dict(
        hidden_size=8, vocab_size=11, width=16, rank=4, think_end_id=4, boundary_token_ids=(7,)
    )
    base.update(kw)
    return PredictorConfig(**base)


def test_gamma_nll_is_the_negative_gamma_log_density() -> None:
    gen = torch.Generator().manual_seed(0)
    f64 = torch.float64
    alpha = torch.empty(500, dtype=f64).uniform_(0.2, 80.0, generator=gen)
    rate = torch.empty(500, dtype=f64).uniform_(0.2, 40.0, generator=gen)
    x = torch.empty(500, dtype=f64).uniform_(0.3, 6.0, generator=gen)
    torch.testing.assert_close(gamma_nll(alpha, rate, x), -Gamma(alpha, rate).log_prob(x))  # type: ignore[no-untyped-call]


def test_remaining_lengths_count_think_end_as_the_last_step() -> None:
    assert remaining_lengths(3).tolist() == [4.0, 3.0, 2.0, 1.0]  # g0 g1 g2 </think>
    assert remaining_lengths(0).tolist() == [1.0]


def test_boundary_tokens_and_think_end_come_from_the_tokenizer() -> None:
    assert boundary_token_ids(["a", "\n", "b\nc", "x"]) == (1, 2)
    think_end, boundary, vocab = resolve_tokens(BASE)
    from testbed.tokenizer import CharCodec

    codec = CharCodec()
    assert think_end == codec.think_end_id
    assert boundary == (codec.encode("\n")[0],)
    assert vocab == codec.vocab_size


def test_raw_at_equals_the_full_head_gathered() -> None:
    torch.manual_seed(1)
    p = BudgetPredictor(_config()).eval()
    h = torch.randn(6, 8)
    tokens = torch.tensor([0, 3, 10, 4, 4, 7])
    a, r = p.raw(h)
    a_at, r_at = p.raw_at(h, tokens)
    torch.testing.assert_close(a_at, a.gather(1, tokens[:, None]).squeeze(1))
    torch.testing.assert_close(r_at, r.gather(1, tokens[:, None]).squeeze(1))
    alpha, rate = p(h)
    assert bool((alpha > 0).all()) and bool((rate > 0).all())


def test_inverse_softplus_roundtrip() -> None:
    for y in (0.05, 1.0, 7.5, 120.0):
        assert abs(float(activate(torch.tensor(inverse_softplus(y)))) - y) < 1e-4 * max(1, y)


def test_save_load_roundtrip_beside_a_model(tmp_path: Path) -> None:
    torch.manual_seed(2)
    p = BudgetPredictor(_config(training={"note": "test"}))
    assert not has_predictor(tmp_path)
    save_predictor(tmp_path, p)
    assert has_predictor(tmp_path)
    assert not list(tmp_path.glob("*.safetensors")), "root *.safetensors would break Qwen2"
    assert load_config(tmp_path) == p.config
    q = load_predictor(tmp_path)
    h = torch.randn(3, 8)
    torch.testing.assert_close(q.raw(h), p.raw(h))


def test_shipped_predictor_matches_the_base_model() -> None:
    config = load_config(BASE)
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(str(BASE))
    assert (config.hidden_size, config.vocab_size) == (hf.hidden_size, hf.vocab_size)
    assert config.think_end_id == resolve_tokens(BASE)[0]
    val = config.training["val"]
    baseline = config.training["val_marginal_baseline"]
    assert isinstance(val, dict) and isinstance(baseline, dict)
    assert val["nll"] < baseline["nll"] - 0.5  # it learned far more than the marginal


@pytest.mark.slow
def test_training_learns_a_length_signal_from_hidden_states() -> None:
    """Synthetic traces: the hidden state encodes the remaining length; the NLL must drop
    well below the moment-matched marginal start."""
    gen = torch.Generator().manual_seed(3)
    n = 4000
    length = torch.randint(1, 120, (n,), generator=gen).float()
    # The length sets the direction of h (a LayerNorm would erase a mere scale).
    d1, d2 = torch.randn(8, generator=gen), torch.randn(8, generator=gen)
    angle = (torch.log1p(length) / 5.0 * torch.pi / 2)[:, None]
    hidden = torch.cos(angle) * d1 + torch.sin(angle) * d2
    hidden = hidden + 0.02 * torch.randn(n, 8, generator=gen)
    token = torch.randint(0, 11, (n,), generator=gen)
    data = Features(
        hidden=hidden, token=token, length=length, boundary=torch.ones(n, dtype=torch.bool)
    )
    predictor, record = train(
        data,
        data,
        _config(),
        lr=3e-3,
        batch_size=256,
        epochs=15,
        minutes=2.0,
        seed=0,
        progress=False,
    )
    val, start = record["val"], record["val_marginal_baseline"]
    assert isinstance(val, dict) and isinstance(start, dict)
    assert val["nll"] < start["nll"] - 0.5
    assert evaluate(predictor, data)["nll"] == pytest.approx(val["nll"], abs=1e-3)


def test_the_traces_are_drawn_on_a_workloads_questions_when_given(tmp_path: Path) -> None:
    from testbed.predictor_cli import chats

    prompts = tmp_path / "fit-part.jsonl"
    prompts.write_text(
        '{"messages": [{"role": "user", "content": "What is 1+2?"}]}\n{"prompt": "Name 3."}\n'
    )
    got = chats(5, 0, prompts)
    assert [c[-1]["content"] for c in got] == ["What is 1+2?", "Name 3."] * 2 + ["What is 1+2?"]
    default = chats(3, 0, None)
    assert len(default) == 3 and all(c[0]["role"] == "user" for c in default)
    assert {c[0]["content"] for c in default}.isdisjoint({"What is 1+2?", "Name 3."})
