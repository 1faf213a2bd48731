"""TokenizerTokens on the testbed model's real tokenizer: ids come from the tokenizer,
and a reasoning model without think tokens fails start-up loudly (no engine needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.engine import ModelTokens
from engines.tokens import TokenizerTokens, generation_eos_ids
from strategies.reasoning import split_ids, thinking_open_after


@pytest.fixture(scope="module")
def tokens(model_dir: Path) -> TokenizerTokens:
    return TokenizerTokens.load(str(model_dir))


def test_ids_are_the_tokenizers(tokens: TokenizerTokens, hf_tokenizer: Any) -> None:
    assert isinstance(tokens, ModelTokens)
    assert tokens.think_start_id == hf_tokenizer.convert_tokens_to_ids("<think>")
    assert tokens.think_end_id == hf_tokenizer.convert_tokens_to_ids("</think>")
    assert hf_tokenizer.eos_token_id in tokens.eos_token_ids


def test_eos_ids_include_generation_config(model_dir: Path, tokens: TokenizerTokens) -> None:
    assert set(generation_eos_ids(str(model_dir))) <= set(tokens.eos_token_ids)


def test_chat_prompt_leaves_thinking_open(tokens: TokenizerTokens) -> None:
    ids = tokens.render_chat([{"role": "user", "content": "Compute 1+2 mod 10."}])
    assert thinking_open_after(ids, tokens)
    assert "Compute 1+2 mod 10." in tokens.decode(ids)


def test_decode_skips_special_tokens_and_split_counts_ids(tokens: TokenizerTokens) -> None:
    assert tokens.think_end_id is not None
    out = [*tokens.encode("1+2=3\n"), tokens.think_end_id, *tokens.encode("\\boxed{3}")]
    out.append(tokens.eos_token_ids[0])
    split = split_ids(out, tokens, thinking_open=True)
    assert tokens.decode(split.reasoning_ids) == "1+2=3\n"
    assert tokens.decode(split.content_ids) == "\\boxed{3}"
    assert split.reasoning_tokens == len(tokens.encode("1+2=3\n"))


def test_reasoning_model_without_think_tokens_fails_loudly(hf_tokenizer: Any) -> None:
    # Characters this tokenizer has no token for: the string encodes to nothing.
    with pytest.raises(RuntimeError, match="☃"):
        TokenizerTokens(hf_tokenizer, eos_token_ids=[], think_start="☃")
    # Partly encodable: the sequence would not be the string, so start-up refuses it.
    with pytest.raises(RuntimeError, match="ABC<"):
        TokenizerTokens(hf_tokenizer, eos_token_ids=[], think_end="ABC<")


def test_think_string_that_is_not_one_token_is_a_sequence(hf_tokenizer: Any) -> None:
    # The testbed tokenizer is character-level: "<reason>" is eight tokens.
    tokens = TokenizerTokens(hf_tokenizer, eos_token_ids=[], think_end="</reason>")
    assert tokens.think_end_ids == tuple(tokens.encode("</reason>"))
    assert len(tokens.think_end_ids) == len("</reason>") and tokens.think_end_id is None
    assert tokens.think_start_ids == (hf_tokenizer.convert_tokens_to_ids("<think>"),)
    plain = TokenizerTokens(hf_tokenizer, eos_token_ids=[], reasoning=False)
    assert plain.think_start_id is None and plain.think_end_id is None
