"""The process reward model (PRM) as the step-search strategies see it.

A PRM scores every *step* of a partial reasoning path: given the prompt and the steps so
far, the probability that each step is right. vLLM serves such a model as a pooling model
with step pooling (``Qwen2ForProcessRewardModel``: one reward per occurrence of a step
tag token); ``engines.local.prm`` implements :class:`StepRewardModel` over it, in
process or behind a vLLM server's ``/pooling`` route.

How a path is shown to the PRM: ``prompt ids + step_1 + tag + step_2 + tag ...``, where
each step's ids exclude the generator's step delimiter and ``tag`` is the PRM's step tag
(for the testbed both are the newline token, so the PRM sees the text as generated).
Tags inside the prompt also get rewards from step pooling; :meth:`ProcessRewardModel.
score_paths` drops them, so callers get exactly one reward per step of each path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from core.base import ResourceKey
from core.errors import BackendError, InvalidRequest


@runtime_checkable
class StepRewardModel(Protocol):
    """A PRM backend: per sequence, the reward in [0, 1] at each step-tag token, in order."""

    async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessRewardModel:
    """A PRM and how paths are shown to it (``Resources`` item ``"prm"``)."""

    model: StepRewardModel
    step_tag_id: int  # appended after every step; vLLM's step pooling reads rewards there
    name: str = "prm"
    max_len: int | None = None  # the PRM's context, when known

    def sequence(self, prompt_ids: Sequence[int], steps: Sequence[Sequence[int]]) -> list[int]:
        seq = list(prompt_ids)
        for step in steps:
            seq.extend(step)
            seq.append(self.step_tag_id)
        return seq

    def check_prompt(self, prompt_ids: Sequence[int]) -> None:
        """A 400 for a prompt that leaves the PRM no room for a step: the request's fault,
        not the server's (a generator served longer than its PRM, as the default is)."""
        if self.max_len is not None and len(prompt_ids) + 1 > self.max_len:
            raise InvalidRequest(
                f"the prompt has {len(prompt_ids)} tokens; the process reward model reads "
                f"{self.max_len}: send a shorter prompt, or a strategy without it",
                param="messages",
            )

    def tags_in(self, ids: Sequence[int]) -> int:
        """How many step tags ``ids`` holds."""
        return sum(1 for t in ids if t == self.step_tag_id)

    async def score_paths(
        self, prompt_ids: Sequence[int], paths: Sequence[Sequence[Sequence[int]]]
    ) -> list[list[float]]:
        """One batched call: for each path (a list of steps), one reward per step.

        Paths with the same ids are sent once: resampled particles and sibling candidates
        often write the same line (a copy costs the PRM a whole path where it reads no
        cache, and where it does, a copy run beside its original may read the original's
        blocks before their rewards are kept and be computed again whole).

        A step's own ids may contain the tag (a step cut mid-way holds no delimiter, a
        real model's step may hold a newline): every tag the PRM reads after the prompt
        counts, and the step's reward is the one at the tag closing it (the last of
        those belonging to it).
        """
        if not paths:
            return []
        self.check_prompt(prompt_ids)
        skip = self.tags_in(prompt_ids)
        sequences = [self.sequence(prompt_ids, steps) for steps in paths]
        if self.max_len is not None:
            for seq in sequences:
                if len(seq) > self.max_len:
                    raise BackendError(
                        f"a path of {len(seq)} tokens exceeds the PRM's context ({self.max_len})"
                    )
        distinct = list(dict.fromkeys(tuple(seq) for seq in sequences))
        raw = await self.model.step_rewards(distinct)
        if len(raw) != len(distinct):
            raise BackendError(f"the PRM returned {len(raw)} results for {len(distinct)} paths")
        of = dict(zip(distinct, raw, strict=True))
        out: list[list[float]] = []
        for steps, seq in zip(paths, sequences, strict=True):
            rewards = [float(r) for r in of[tuple(seq)][skip:]]
            per_step: list[float] = []
            at = 0
            for step in steps:
                at += self.tags_in(step) + 1
                if at > len(rewards):
                    raise BackendError("the PRM returned fewer step rewards than steps")
                per_step.append(rewards[at - 1])
            if not all(math.isfinite(r) for r in per_step):
                raise BackendError("the PRM returned a non-finite step reward")
            out.append(per_step)
        return out


RESOURCE_KEY: Final = ResourceKey("prm", ProcessRewardModel)

# Aggregates of a path's step rewards (the ``aggregate`` option of beam search).
AGGREGATES: Final = ("last", "min", "prod")


def aggregate(rewards: Sequence[float], how: str) -> float:
    """A path's score from its step rewards (no step yet: 1.0, nothing is wrong so far)."""
    if not rewards:
        return 1.0
    if how == "last":
        return rewards[-1]
    if how == "min":
        return min(rewards)
    if how == "prod":
        return math.prod(rewards)
    raise ValueError(f"unknown aggregate {how!r}")
