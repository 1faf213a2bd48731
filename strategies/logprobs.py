"""The client's logprobs (OpenAI ``logprobs``/``top_logprobs``, completions' ``echo``):
from the engine's token ids to the texts a client reads, and which strategies return them.

Two optional attributes of a strategy class say what it honours (the server refuses
the fields otherwise). ``returns_logprobs = True``: it returns the logprobs of the trajectory
it answers with: ``plain`` of every choice (prompt logprobs too, for ``echo``), the
sampling strategies of each chosen sample. ``returns_prompt_logprobs = True`` (``plain``):
its non-streamed choices carry the prompt's logprobs when the engine request asks for
them (``SamplingConfig.prompt_logprobs``). The server refuses logprobs for any other
strategy (a 400 naming the field and the strategy): its answer is not one sampled
trajectory (a search's path, an elastic answer with a forced end, a PETS vote).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.base import LogprobEntry
from core.engine import ModelTokens, TokenLogprob


class Texts:
    """Token id -> its text, decoded once per id (a response repeats few ids)."""

    def __init__(self, tokens: ModelTokens) -> None:
        self._tokens = tokens
        self._cache: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self._cache[token_id] = self._tokens.token_text(token_id)
        return text

    def entry(self, lp: TokenLogprob) -> LogprobEntry:
        return LogprobEntry(
            token=self(lp.token_id),
            logprob=lp.logprob,
            top=tuple((self(t), v) for t, v in lp.top),
        )

    def entries(self, lps: Sequence[TokenLogprob]) -> tuple[LogprobEntry, ...]:
        return tuple(self.entry(lp) for lp in lps)

    def prompt(
        self, lps: Sequence[TokenLogprob | None], prompt_ids: Sequence[int]
    ) -> tuple[LogprobEntry, ...]:
        """A prompt's entries: the first token's (no logprob) included."""
        return tuple(
            LogprobEntry(self(t), None) if lp is None else self.entry(lp)
            for t, lp in zip(prompt_ids, lps, strict=True)
        )
