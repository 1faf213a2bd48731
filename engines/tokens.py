"""``ModelTokens`` over a Hugging Face tokenizer: think ids, EOS ids, chat rendering.

Resolved once at start-up from the model directory (or hub id). Think delimiters are
looked up by their strings, never hard-coded: a string that is one vocab token gives
that id, any other the token sequence it encodes to; a reasoning model whose delimiter
encodes to nothing fails start-up loudly instead of silently never splitting or
budgeting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from engines.settings import EngineSettings


class HFTokenizer(Protocol):
    """The part of ``transformers.PreTrainedTokenizerBase`` we use."""

    eos_token_id: int | None

    def get_vocab(self) -> dict[str, int]: ...

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def apply_chat_template(self, conversation: object, **kwargs: object) -> object: ...


class TokenizerTokens:
    """The tokenizer facts strategies rely on (implements ``core.engine.ModelTokens``)."""

    def __init__(
        self,
        tokenizer: HFTokenizer,
        *,
        eos_token_ids: Sequence[int],
        think_start: str = "<think>",
        think_end: str = "</think>",
        reasoning: bool = True,
    ) -> None:
        self._tok = tokenizer
        # Ids a request may name (logit_bias): the tokenizer's, added tokens included.
        self.vocab_size: int = max(tokenizer.get_vocab().values(), default=-1) + 1
        self.think_start_ids: tuple[int, ...] = ()
        self.think_end_ids: tuple[int, ...] = ()
        if reasoning:
            vocab = tokenizer.get_vocab()
            self.think_start_ids = _delimiter_ids(tokenizer, vocab, think_start)
            self.think_end_ids = _delimiter_ids(tokenizer, vocab, think_end)
            missing = [
                s
                for s, ids in ((think_start, self.think_start_ids), (think_end, self.think_end_ids))
                if not ids
            ]
            if missing:
                raise RuntimeError(
                    "the model is configured as a reasoning model (setting 'reasoning') but "
                    f"its tokenizer encodes {missing} to no tokens; set the think strings "
                    "(think_start/think_end, reasoning_format) or reasoning=false"
                )
        self.think_start_id: int | None = _single(self.think_start_ids)
        self.think_end_id: int | None = _single(self.think_end_ids)
        ids = list(dict.fromkeys(eos_token_ids))
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
            ids.append(tokenizer.eos_token_id)
        if not ids:
            raise RuntimeError("the model defines no EOS token (generation_config or tokenizer)")
        self.eos_token_ids: tuple[int, ...] = tuple(ids)

    @classmethod
    def load(
        cls,
        model: str,
        *,
        think_start: str = "<think>",
        think_end: str = "</think>",
        reasoning: bool = True,
        trust_remote_code: bool = False,
    ) -> TokenizerTokens:
        """Load the tokenizer of ``model`` (a directory or hub id) and resolve the ids."""
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
        return cls(
            cast(HFTokenizer, tok),
            eos_token_ids=generation_eos_ids(model),
            think_start=think_start,
            think_end=think_end,
            reasoning=reasoning,
        )

    @classmethod
    def for_settings(cls, settings: EngineSettings) -> TokenizerTokens:
        """The tokenizer of the served model, as every engine of this gateway loads it."""
        return cls.load(
            settings.model_path,
            think_start=settings.think_start,
            think_end=settings.think_end,
            reasoning=settings.reasoning,
            trust_remote_code=settings.trust_remote_code,
        )

    def decode(self, token_ids: Sequence[int]) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def token_text(self, token_id: int) -> str:
        return self._tok.decode([token_id], skip_special_tokens=False)

    def render_chat(
        self,
        messages: Sequence[Mapping[str, object]],
        tools: Sequence[Mapping[str, object]] | None = None,
    ) -> list[int]:
        # Render to text, then encode: the template writes the special tokens itself.
        text = self._tok.apply_chat_template(
            [dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            tokenize=False,
            add_generation_prompt=True,
        )
        if not isinstance(text, str):
            raise TypeError(f"chat template rendered {type(text).__name__}, not text")
        return self.encode(text)


def _delimiter_ids(tokenizer: HFTokenizer, vocab: Mapping[str, int], text: str) -> tuple[int, ...]:
    """A think string's ids: its vocab token when it is one (special tokens such as
    ``<think>`` in most reasoning models), else the sequence the tokenizer encodes it to
    (empty when it encodes to nothing: the caller fails start-up)."""
    if text in vocab:
        return (vocab[text],)
    ids = tuple(tokenizer.encode(text, add_special_tokens=False)) if text else ()
    if not ids:
        return ()
    # A tokenizer may drop or replace characters it cannot encode: a sequence that does
    # not decode back to the string would split and force the wrong tokens.
    unk = getattr(tokenizer, "unk_token_id", None)
    back = tokenizer.decode(list(ids), skip_special_tokens=False)
    if (unk is not None and unk in ids) or back.strip() != text.strip():
        raise RuntimeError(
            f"think string {text!r} is not one token and its encoding {list(ids)} decodes "
            f"to {back!r}, not to the string; set think_start/think_end to strings the "
            "tokenizer encodes faithfully"
        )
    return ids


def _single(ids: tuple[int, ...]) -> int | None:
    return ids[0] if len(ids) == 1 else None


def generation_eos_ids(model: str) -> list[int]:
    """EOS ids from ``generation_config.json`` of a local model dir (empty otherwise)."""
    path = Path(model) / "generation_config.json"
    if not path.is_file():
        try:
            from transformers import GenerationConfig

            eos = GenerationConfig.from_pretrained(model).eos_token_id
        except (OSError, ValueError):
            return []
    else:
        eos = json.loads(path.read_text()).get("eos_token_id")
    if eos is None:
        return []
    return [int(e) for e in eos] if isinstance(eos, list) else [int(eos)]
