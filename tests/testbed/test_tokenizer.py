from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testbed import MODEL_NAMES, model_path
from testbed.task import make_questions
from testbed.tokenizer import (
    CHARACTERS,
    IM_END,
    SPECIAL_TOKENS,
    THINK,
    THINK_END,
    CharCodec,
    chat_prompt,
    save_tokenizer,
)
from testbed.tools import TOOLS_CHAT_TEMPLATE
from testbed.traces import FULL, make_trace

SAMPLE = (
    chat_prompt("Compute 3+8-5+7 mod 10.")
    + "3+8=1\ncheck 1-8=3\n1-5+7=3\n</think>\n\\boxed{3}"
    + IM_END
)


def shipped_dirs() -> list[Path]:
    return [model_path(n) for n in MODEL_NAMES if (model_path(n) / "tokenizer.json").exists()]


def roundtrip_cases() -> list[str]:
    cases = [SAMPLE, CHARACTERS, " ", "\n", "  \n\n ", "a b\nc", "check 6+5=1\n"]
    cases += list(CHARACTERS)
    return cases


def test_vocabulary_is_tiny_and_one_token_per_character() -> None:
    codec = CharCodec()
    assert 50 <= codec.vocab_size <= 90
    for ch in CHARACTERS:
        assert len(codec.encode(ch)) == 1, repr(ch)
    for tok in SPECIAL_TOKENS:
        assert codec.encode(tok) == [codec.token_id(tok)]
    # Ids the gateway relies on: stable across exports.
    assert [codec.token_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tok")
    save_tokenizer(d)
    return d


def _hf(directory: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


@pytest.mark.parametrize("text", roundtrip_cases())
def test_transformers_roundtrip(saved: Path, text: str) -> None:
    tok = _hf(saved)
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == CharCodec().encode(text)
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_every_trace_roundtrips_through_transformers(saved: Path) -> None:
    import random

    tok = _hf(saved)
    rng = random.Random(0)
    for q in make_questions("test", 50, seed=0):
        text = chat_prompt(q.prompt) + make_trace(q, rng, FULL).completion + IM_END
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_chat_template(saved: Path) -> None:
    tok = _hf(saved)
    user = {"role": "user", "content": "Compute 3+8 mod 10."}
    prompt = tok.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
    assert (
        prompt
        == "<|im_start|>user\nCompute 3+8 mod 10.<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )
    assert prompt == chat_prompt("Compute 3+8 mod 10.")
    raw = {"role": "assistant", "content": "3+8=1\n</think>\n\\boxed{1}"}
    split = {"role": "assistant", "reasoning_content": "3+8=1\n", "content": "\n\\boxed{1}"}
    full = tok.apply_chat_template([user, raw], tokenize=False)
    assert full == prompt + "3+8=1\n</think>\n\\boxed{1}<|im_end|>\n"
    assert tok.apply_chat_template([user, split], tokenize=False) == full
    assert tok.eos_token == IM_END
    assert tok.convert_tokens_to_ids([THINK, THINK_END]) == [3, 4]


@pytest.mark.parametrize("directory", shipped_dirs(), ids=lambda p: p.name)
def test_shipped_tokenizer_is_the_built_one(saved: Path, directory: Path) -> None:
    assert (directory / "tokenizer.json").read_text() == (saved / "tokenizer.json").read_text()
    config = json.loads((saved / "tokenizer_config.json").read_text())
    if directory.name == "tools":  # the same, with the tools template (testbed/tools.py)
        config["chat_template"] = TOOLS_CHAT_TEMPLATE
    assert json.loads((directory / "tokenizer_config.json").read_text()) == config


@pytest.mark.slow  # loads the tokenizer through vLLM's import chain: ~2 s
def test_vllm_tokenizer_roundtrip(saved: Path) -> None:
    """vLLM's own loading path (byte-level reload of Qwen2 tokenizers) keeps every char."""
    pytest.importorskip("vllm")
    from vllm.tokenizers.registry import get_tokenizer

    tok = get_tokenizer(str(saved))
    codec = CharCodec()
    for text in roundtrip_cases():
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == codec.encode(text), repr(text)
        assert tok.decode(ids, skip_special_tokens=False) == text, repr(text)
