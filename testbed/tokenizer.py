"""The testbed's character-level tokenizer and chat template.

Every character is one token. The vocabulary is spelled in the GPT-2 byte-level alphabet
(space is `Ġ`, newline is `Ċ`) behind a ByteLevel pre-tokenizer and decoder: vLLM and
`transformers` reload tokenizers of Qwen2 models through byte-level machinery, and a raw
`" "` or `"\\n"` entry is silently dropped on that path. Token ids are part of the
contract with the gateway (think-token ids, EOS): never reorder this vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers import processors as tk_processors

PAD: Final = "<|endoftext|>"
IM_START: Final = "<|im_start|>"
IM_END: Final = "<|im_end|>"
THINK: Final = "<think>"
THINK_END: Final = "</think>"
# Order fixes the ids 0..4; the gateway reads them from the files, but others cache them.
SPECIAL_TOKENS: Final = (PAD, IM_START, IM_END, THINK, THINK_END)
EOS: Final = IM_END

# The task needs digits, `+-=.\{}`, space, newline and the letters of its words; the rest
# of lower case and a few marks let other text pass through without unknown tokens.
CHARACTERS: Final = "0123456789abcdefghijklmnopqrstuvwxyzCMQTW \n+-=.,:;?!*/()[]{}<>|_\\'\""

# R1/Qwen3 style: the generation prompt opens the thinking block, so completions start
# inside `<think>` and the answer follows `</think>`.
CHAT_TEMPLATE: Final = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    # An assistant turn renders as the stream the model generated: `<think>\n`, the
    # reasoning (`reasoning_content`, or vLLM's `reasoning`), `</think>`, the answer. A turn
    # given as one raw completion (content holding `...</think>...`) renders the same way.
    "{%- if message['reasoning_content'] is defined"
    " and message['reasoning_content'] is not none -%}"
    "{%- set reasoning = message['reasoning_content'] -%}"
    "{%- elif message['reasoning'] is defined and message['reasoning'] is not none -%}"
    "{%- set reasoning = message['reasoning'] -%}"
    "{%- else -%}{%- set reasoning = none -%}{%- endif -%}"
    "{{ '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- if reasoning is not none -%}{{ reasoning + '</think>' }}{%- endif -%}"
    "{{ (message['content'] or '') + '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n<think>\\n' }}"
    "{%- endif -%}"
)
GENERATION_PROMPT: Final = f"{IM_START}assistant\n{THINK}\n"


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters."""
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, codes, strict=True)}


def vocabulary() -> dict[str, int]:
    """Token string -> id: special tokens first, then one byte-level symbol per character."""
    byte_map = _bytes_to_unicode()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        (byte,) = ch.encode()
        vocab[byte_map[byte]] = len(vocab)
    return vocab


def build_tokenizer() -> Tokenizer:
    # BPE without merges is a character-level model that still speaks ByteLevel.
    model = models.BPE(vocab=vocabulary(), merges=[], unk_token=PAD, fuse_unk=False)
    tok = Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = tk_processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def tokenizer_config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 512,
        "bos_token": None,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": PAD,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_prefix_space": False,
        "chat_template": CHAT_TEMPLATE,
        "extra_special_tokens": [THINK, THINK_END],
    }


def save_tokenizer(directory: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2))
    special = {"eos_token": EOS, "pad_token": PAD, "unk_token": PAD}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2))


class CharCodec:
    """Fast in-process encode/decode for training; agrees with the saved tokenizer."""

    def __init__(self) -> None:
        self._tok = build_tokenizer()
        self.vocab_size: int = self._tok.get_vocab_size()
        self.pad_id: int = self.token_id(PAD)
        self.eos_id: int = self.token_id(EOS)
        self.think_id: int = self.token_id(THINK)
        self.think_end_id: int = self.token_id(THINK_END)

    def token_id(self, token: str) -> int:
        tid = self._tok.token_to_id(token)
        if tid is None:
            raise KeyError(token)
        return tid

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, ids: list[int]) -> str:
        text: str = self._tok.decode(ids, skip_special_tokens=False)
        return text


def chat_prompt(user_message: str) -> str:
    """The chat-template rendering of one user turn plus the generation prompt."""
    return f"{IM_START}user\n{user_message}{IM_END}\n{GENERATION_PROMPT}"
