"""Model configuration and export of the testbed models as Hugging Face directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import torch
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2ForSequenceClassification,
)

from testbed.tokenizer import CharCodec, save_tokenizer

MAX_POSITIONS: Final = 65536
"""The positions a generation model's config declares: the server's default context is
long enough for an agent harness's first request (RoPE computes any position; the models
are trained on sequences of at most 512 tokens, so their answers past that are poor)."""
SCORER_POSITIONS: Final = 512
"""A scorer's (reward model, PRM): the gateway scores within what they were trained on."""


def qwen2_config(codec: CharCodec, *, num_labels: int | None = None) -> Qwen2Config:
    """The one architecture of the family (the reward model adds a one-label head).

    head_dim 64 because vLLM's CPU attention backend refuses 16; untied embeddings
    because tied ones collapsed the digit embeddings and the loss stayed flat. Two KV
    heads, not one: with one, both query heads of a layer must share keys and values, and
    finding the next operand in the question (content and position at once) took the full
    phase from about 0.4 to only 0.6 probability in 1,000 steps; with two it reached 0.9
    (same seed and data, 16k more parameters; `testbed/README.md`).
    """
    fields: dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM"],
        "vocab_size": codec.vocab_size,
        "hidden_size": 128,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "max_position_embeddings": MAX_POSITIONS,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "bos_token_id": codec.pad_id,
        "eos_token_id": codec.eos_id,
        "pad_token_id": codec.pad_id,
        "dtype": "float32",
    }
    if num_labels is not None:
        fields.update(
            num_labels=num_labels,
            architectures=["Qwen2ForSequenceClassification"],
            max_position_embeddings=SCORER_POSITIONS,
        )
    return Qwen2Config(**fields)


def new_causal_lm(codec: CharCodec, *, seed: int) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(qwen2_config(codec))  # type: ignore[no-untyped-call]


def new_reward_model(codec: CharCodec, *, seed: int) -> Qwen2ForSequenceClassification:
    torch.manual_seed(seed)
    config = qwen2_config(codec, num_labels=1)
    return Qwen2ForSequenceClassification(config)  # type: ignore[no-untyped-call]


def export(model: PreTrainedModel, codec: CharCodec, directory: Path) -> None:
    """Write a directory that both `transformers` and vLLM load as is."""
    directory.mkdir(parents=True, exist_ok=True)
    model.config.pad_token_id = codec.pad_id
    model.save_pretrained(str(directory), safe_serialization=True)
    if isinstance(model, Qwen2ForCausalLM):
        gen = GenerationConfig(  # type: ignore[no-untyped-call]
            bos_token_id=codec.pad_id,
            eos_token_id=[codec.eos_id, codec.pad_id],
            pad_token_id=codec.pad_id,
            do_sample=False,
        )
        gen.save_pretrained(str(directory))
    save_tokenizer(directory)


def write_card(directory: Path, card: dict[str, object]) -> None:
    (directory / "card.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")


def read_card(directory: Path) -> dict[str, object]:
    path = directory / "card.json"
    if not path.exists():
        return {}
    data: dict[str, object] = json.loads(path.read_text())
    return data
