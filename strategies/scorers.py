"""Scorers: one number per sample, higher is better, behind one protocol.

Three kinds, configured per server and chosen per request by name (body ``scorer``):

* ``logprob`` -- :class:`MeanLogprob`: mean log-probability of the sampled tokens,
  free (the engine reports it when ``SamplingConfig.logprobs`` is set).
* ``reward`` -- :class:`RewardModelScorer`: an outcome reward model scoring the prompt
  and the whole response (thinking included) as one token sequence, exactly as the
  chat template renders an assistant turn. The model behind it is a
  :class:`SequenceScorer`: an in-process vLLM pooling engine
  (``engines.local.reward``) or a remote vLLM ``/classify`` (:class:`RemoteClassify`).
* ``verifier`` -- :class:`VerifierScorer`: an external service,
  ``POST {"prompt", "responses", "reasoning"} -> {"scores"}``, behind a
  :class:`Verifier` (``engines.remote.scorer_clients.VerifierClient``).
* ``prm`` -- ``strategies.sampling.prm_scorer.PrmScorer``: the step searches' process reward
  model, each sample's lowest step reward (attached where a PRM is, not in this set).

Failures of a scorer's backend are ``BackendError``s (the client sees a 5xx); a scorer
never invents scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Final, Protocol, runtime_checkable

from core.base import ResourceKey
from core.engine import ModelTokens, Sample
from core.errors import BackendError, InvalidRequest
from strategies.reasoning import split_ids

SCORER_KINDS: Final = ("logprob", "reward", "verifier", "prm")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScoreQuery:
    """What a scorer sees: the prompt and the finished samples of one request."""

    prompt_token_ids: tuple[int, ...]
    samples: tuple[Sample, ...]
    tokens: ModelTokens
    thinking_open: bool


@runtime_checkable
class Scorer(Protocol):
    """Scores every sample of a query; one finite float per sample, in sample order."""

    name: ClassVar[str]
    # Whether samples must be drawn with SamplingConfig.logprobs set.
    needs_logprobs: ClassVar[bool]

    async def score(self, query: ScoreQuery) -> list[float]: ...


@runtime_checkable
class SequenceScorer(Protocol):
    """A reward model: one raw score (the logit, no activation) per token sequence."""

    async def score_sequences(self, sequences: Sequence[Sequence[int]]) -> list[float]: ...


@runtime_checkable
class Verifier(Protocol):
    """An outside verifier: one score per response, given the prompt, each response's
    answer text and its thinking text."""

    async def verify(
        self, prompt: str, responses: Sequence[str], reasoning: Sequence[str]
    ) -> list[float]: ...


def checked_scores(scores: Sequence[float], expected: int, source: str) -> list[float]:
    out = [float(s) for s in scores]
    if len(out) != expected:
        raise BackendError(f"{source} returned {len(out)} scores for {expected} samples")
    if not all(math.isfinite(s) for s in out):
        raise BackendError(f"{source} returned a non-finite score")
    return out


class MeanLogprob:
    """Mean log-probability per generated token (0 for an empty sample)."""

    name: ClassVar[str] = "logprob"
    needs_logprobs: ClassVar[bool] = True

    async def score(self, query: ScoreQuery) -> list[float]:
        scores = []
        for sample in query.samples:
            if sample.cumulative_logprob is None:
                raise BackendError("the engine returned no logprobs for the logprob scorer")
            scores.append(sample.cumulative_logprob / max(1, len(sample.token_ids)))
        return checked_scores(scores, len(query.samples), "logprob scorer")


class RewardModelScorer:
    """An outcome reward model over the chat-template rendering of the whole turn.

    The scored sequence is ``prompt ids + sample ids + turn_end``: the sample's own
    end-of-turn token (EOS), if any, is dropped and ``turn_end`` (the ids the chat
    template writes after an assistant turn, e.g. ``<|im_end|>\\n``) appended, so a
    finished and a truncated sample end the same way, as the model was trained.
    """

    name: ClassVar[str] = "reward"
    needs_logprobs: ClassVar[bool] = False

    def __init__(
        self, model: SequenceScorer, *, turn_end: Sequence[int] = (), max_len: int | None = None
    ) -> None:
        self.model = model
        self.turn_end = tuple(turn_end)
        self.max_len = max_len  # the reward model's context, when it is known

    def sequence(self, query: ScoreQuery, sample: Sample) -> tuple[int, ...]:
        """What the reward model scores for ``sample``. A response that does not fit
        the reward model's context is cut at the end, like a sample the length limit
        cut (the reward model saw such truncated turns in training)."""
        ids = sample.token_ids
        eos = set(query.tokens.eos_token_ids)
        while ids and ids[-1] in eos:
            ids = ids[:-1]
        if self.max_len is not None:
            room = self.max_len - len(query.prompt_token_ids) - len(self.turn_end)
            if room <= 0:  # the prompt alone fills it (a generator served longer)
                raise InvalidRequest(
                    f"the prompt has {len(query.prompt_token_ids)} tokens; the reward model "
                    f"reads {self.max_len}: send a shorter prompt, or another scorer "
                    '(the body option "scorer": "logprob")',
                    param="messages",
                )
            ids = ids[:room]
        return query.prompt_token_ids + ids + self.turn_end

    async def score(self, query: ScoreQuery) -> list[float]:
        sequences = [self.sequence(query, s) for s in query.samples]
        scores = await self.model.score_sequences(sequences)
        return checked_scores(scores, len(sequences), "reward model")


class VerifierScorer:
    """Each sample's answer and thinking, decoded apart (special tokens left out), and
    the prompt's text, scored by an outside :class:`Verifier`."""

    name: ClassVar[str] = "verifier"
    needs_logprobs: ClassVar[bool] = False

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    async def score(self, query: ScoreQuery) -> list[float]:
        tokens = query.tokens
        splits = [
            split_ids(s.token_ids, tokens, thinking_open=query.thinking_open) for s in query.samples
        ]
        scores = await self.verifier.verify(
            tokens.decode(query.prompt_token_ids),
            [tokens.decode(s.content_ids) for s in splits],
            [tokens.decode(s.reasoning_ids) for s in splits],
        )
        return checked_scores(scores, len(query.samples), "verifier")


def chatml_turn_end(tokens: ModelTokens) -> tuple[int, ...]:
    """``<|im_end|>\\n``, how ChatML templates (Qwen, the testbed) close a turn."""
    if not tokens.eos_token_ids:
        raise ValueError("the tokenizer has no EOS token")
    return (tokens.eos_token_ids[0], *tokens.encode("\n"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ScorerSet:
    """The scorers a server has configured (``Resources`` item ``"scorers"``), and the
    one used when a request names none."""

    scorers: Mapping[str, Scorer] = field(default_factory=dict)
    default: str | None = None

    def get(self, name: str | None) -> Scorer | None:
        """The scorer called ``name`` (the default for None); None when not configured."""
        key = name if name is not None else self.default
        return self.scorers.get(key) if key is not None else None

    @classmethod
    def build(cls, *scorers: Scorer, default: str | None = None) -> ScorerSet:
        by_name: dict[str, Scorer] = {s.name: s for s in scorers}
        if default is None:
            default = "reward" if "reward" in by_name else (scorers[0].name if scorers else None)
        if default is not None and default not in by_name:
            raise ValueError(f"default scorer {default!r} is not configured")
        return cls(scorers=by_name, default=default)


RESOURCE_KEY: Final = ResourceKey("scorers", ScorerSet)
