"""Reasoning-format presets, the settings that pick them, and how ``TokenizerTokens``
resolves a think string: one vocab token, else a token sequence, else a loud failure."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import ValidationError

from core.reasoning_formats import DEFAULT_FORMAT, REASONING_FORMATS, reasoning_format
from engines.tokens import TokenizerTokens
from server.cli import settings_parser
from server.settings import Settings

HARMONY = REASONING_FORMATS["harmony"]


class PieceTokenizer:
    """A stand-in HF tokenizer: greedy longest match over a small vocab of pieces."""

    eos_token_id: int | None = 0
    unk_token_id: int | None = None

    def __init__(self, pieces: Sequence[str]) -> None:
        self.vocab = {p: i for i, p in enumerate(["<eos>", *pieces])}
        self._by_id = {i: p for p, i in self.vocab.items()}

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            piece = max((p for p in self.vocab if text.startswith(p, i)), key=len, default=None)
            if piece is None:
                i += 1  # like a tokenizer without unk: the character is dropped
                continue
            ids.append(self.vocab[piece])
            i += len(piece)
        return ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(self._by_id[t] for t in token_ids)

    def apply_chat_template(self, conversation: object, **kwargs: object) -> object:
        return ""


BPE = PieceTokenizer(["<think>", "</", "think", ">", "a", "b", " "])
GPT_OSS = PieceTokenizer(
    ["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "analysis", "final", "assistant"]
)


def test_presets_table() -> None:
    assert DEFAULT_FORMAT in REASONING_FORMATS
    tags = REASONING_FORMATS["think-tags"]
    assert (tags.think_start, tags.think_end) == ("<think>", "</think>")
    assert HARMONY.think_start == "<|channel|>analysis<|message|>"
    assert HARMONY.think_end == "<|end|><|start|>assistant<|channel|>final<|message|>"
    with pytest.raises(ValueError, match="think-tags, harmony"):
        reasoning_format("chatml")


def test_one_token_a_sequence_and_nothing() -> None:
    tokens = TokenizerTokens(BPE, eos_token_ids=[])
    assert tokens.think_start_ids == (BPE.vocab["<think>"],) == (tokens.think_start_id,)
    assert tokens.think_end_ids == tuple(BPE.encode("</think>")) and len(tokens.think_end_ids) == 3
    assert tokens.think_end_id is None
    with pytest.raises(RuntimeError, match="encodes \\['<xyz>'"):
        TokenizerTokens(PieceTokenizer(["a"]), eos_token_ids=[], think_start="<xyz>")
    with pytest.raises(RuntimeError, match="decodes to"):
        TokenizerTokens(BPE, eos_token_ids=[], think_end="</thinking>")  # "ing" is lost
    plain = TokenizerTokens(BPE, eos_token_ids=[], reasoning=False)
    assert plain.think_start_ids == plain.think_end_ids == ()
    assert plain.think_start_id is None and plain.think_end_id is None


def test_harmony_strings_resolve_to_channel_sequences() -> None:
    tokens = TokenizerTokens(
        GPT_OSS, eos_token_ids=[], think_start=HARMONY.think_start, think_end=HARMONY.think_end
    )
    names = [GPT_OSS.decode([t]) for t in tokens.think_end_ids]
    assert names == ["<|end|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>"]
    assert len(tokens.think_start_ids) == 3


def test_settings_take_the_preset_unless_strings_are_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert (Settings().think_start, Settings().think_end) == ("<think>", "</think>")
    harmony = Settings(reasoning_format="harmony")
    assert (harmony.think_start, harmony.think_end) == (HARMONY.think_start, HARMONY.think_end)
    mixed = Settings(reasoning_format="harmony", think_end="</think>")  # explicit wins
    assert (mixed.think_start, mixed.think_end) == (HARMONY.think_start, "</think>")
    monkeypatch.setenv("THINKGATE_REASONING_FORMAT", "harmony")
    assert Settings().think_end == HARMONY.think_end
    with pytest.raises(ValidationError, match="unknown reasoning format 'chatml'"):
        Settings(reasoning_format="chatml")


def test_the_grammar_waits_for_the_presets_reasoning_parser() -> None:
    """``response_format``'s grammar starts where vLLM's reasoning parser sees thinking
    end: the preset's parser for the preset's strings, none for strings of one's own."""
    assert Settings().grammar_reasoning_parser == "deepseek_r1"
    assert Settings().local.reasoning_parser == "deepseek_r1"
    assert Settings(reasoning_format="harmony").grammar_reasoning_parser == "openai_gptoss"
    assert Settings(think_end="<end>").grammar_reasoning_parser == ""
    assert Settings(think_end="<end>", reasoning_parser="mine").grammar_reasoning_parser == "mine"
    assert Settings(reasoning=False).grammar_reasoning_parser == ""


def test_cli_flag() -> None:
    parser = settings_parser(Settings)
    given = vars(parser.parse_args(["--reasoning-format", "harmony", "--think-start", "<t>"]))
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    assert settings.reasoning_format == "harmony"
    assert (settings.think_start, settings.think_end) == ("<t>", HARMONY.think_end)
