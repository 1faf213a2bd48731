"""``scorer: "prm"``: the process reward model scoring whole samples, for the sampling
strategies (PRM-weighted Best-of-N, as Snell et al. 2024 and search-and-learn compare the
step searches against).

A sample is cut into steps exactly as a step search would have generated it: its
thinking split at the step delimiter (the delimiter itself left out, empty steps
skipped), and, where the thinking closed, a last step holding what followed the last
delimiter and the end-of-thinking delimiter (the search's closing step: the PRM judges
the end of thinking too). A model without thinking delimiters has its whole output cut
into steps. A sample's score is its lowest step reward (the step searches' default
``aggregate``: a PRM that checks each step's own arithmetic scores the steps after an
error high again), in [0, 1]; a sample with no step scores 0 (nothing the PRM could
judge). Every sample of a pool goes to the PRM in one batched call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from core.engine import Sample
from strategies.prm import ProcessRewardModel, aggregate
from strategies.reasoning import split_ids
from strategies.scorers import ScoreQuery, checked_scores

Steps = list[tuple[int, ...]]


def cut(ids: Sequence[int], delimiter: Sequence[int]) -> Steps:
    """``ids`` split at every ``delimiter``, the delimiters left out; the piece after
    the last delimiter is the last item (empty when ``ids`` ends with one)."""
    ids, d = tuple(ids), tuple(delimiter)
    if not d:
        return [ids]
    pieces: Steps = []
    start = at = 0
    while at <= len(ids) - len(d):
        if ids[at : at + len(d)] == d:
            pieces.append(ids[start:at])
            at += len(d)
            start = at
        else:
            at += 1
    pieces.append(ids[start:])
    return pieces


def sample_steps(query: ScoreQuery, sample: Sample, delimiter: Sequence[int]) -> Steps:
    """The steps a step search would have generated for ``sample``."""
    tokens = query.tokens
    ids = tuple(sample.token_ids)
    eos = set(tokens.eos_token_ids)
    while ids and ids[-1] in eos:  # a sample that ended in its thinking ends there
        ids = ids[:-1]
    if not tokens.think_end_ids:
        return [p for p in cut(ids, delimiter) if p]
    split = split_ids(ids, tokens, thinking_open=query.thinking_open)
    *steps, rest = cut(split.reasoning_ids, delimiter)
    if split.think_closed:
        rest = rest + tuple(tokens.think_end_ids)
    return [s for s in (*steps, rest) if s]


class PrmScorer:
    """Each sample's lowest step reward from the process reward model."""

    name: ClassVar[str] = "prm"
    needs_logprobs: ClassVar[bool] = False
    # Scores are probabilities: a vote may sum them (best-of-n ``select: vote``).
    weights: ClassVar[bool] = True

    def __init__(self, prm: ProcessRewardModel, *, delimiter: Sequence[int]) -> None:
        self.prm = prm
        self.delimiter = tuple(delimiter)

    def _fitting(self, prompt: Sequence[int], steps: Steps) -> Steps:
        # A sample that filled the context is one tag longer as the PRM reads it (the
        # closing tag): its last steps are left out rather than the call refused.
        limit = self.prm.max_len
        while steps and limit is not None and len(self.prm.sequence(prompt, steps)) > limit:
            steps = steps[:-1]
        return steps

    async def score(self, query: ScoreQuery) -> list[float]:
        prompt = query.prompt_token_ids
        self.prm.check_prompt(prompt)
        paths = [
            self._fitting(prompt, sample_steps(query, s, self.delimiter)) for s in query.samples
        ]
        asked = [i for i, p in enumerate(paths) if p]
        rewards = await self.prm.score_paths(prompt, [paths[i] for i in asked])
        scores = [0.0] * len(paths)
        for i, r in zip(asked, rewards, strict=True):
            scores[i] = aggregate(r, "min")
        return checked_scores(scores, len(query.samples), "process reward model")
