"""What a finished PETS batch job keeps per question: a domain value, stored as JSON.

The job computes these once, at completion, from its tallies; the store keeps them in
order; ``server/batches/pets_wire.py`` renders each as an OpenAI batch output line when a client
asks. Keeping the wire format out of the stored value means a change of wire (a new
field, another API's batch format) needs no store migration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core.base import JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerVotes:
    answer: str  # the normalised representative of one answer class
    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QuestionOutcome:
    """One question's result: the message of the winning answer class (the first
    sample that gave it), the votes, and what the question's samples billed."""

    custom_id: str
    content: str
    reasoning: str
    finish_reason: str  # ``abort`` when no sample came back (nothing to show)
    answer: str | None  # None: no sample had an answer
    votes: tuple[AnswerVotes, ...]  # most votes first
    samples: int
    discarded: int  # samples without an answer
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int

    def to_json(self) -> dict[str, JSON]:
        return {
            "custom_id": self.custom_id,
            "content": self.content,
            "reasoning": self.reasoning,
            "finish_reason": self.finish_reason,
            "answer": self.answer,
            "votes": [{"answer": v.answer, "count": v.count} for v in self.votes],
            "samples": self.samples,
            "discarded": self.discarded,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, JSON]) -> QuestionOutcome:
        votes = doc["votes"]
        assert isinstance(votes, list)
        answer = doc["answer"]
        return cls(
            custom_id=str(doc["custom_id"]),
            content=str(doc["content"]),
            reasoning=str(doc["reasoning"]),
            finish_reason=str(doc["finish_reason"]),
            answer=None if answer is None else str(answer),
            votes=tuple(
                AnswerVotes(answer=str(v["answer"]), count=_int(v["count"]))
                for v in votes
                if isinstance(v, dict)
            ),
            samples=_int(doc["samples"]),
            discarded=_int(doc["discarded"]),
            prompt_tokens=_int(doc["prompt_tokens"]),
            completion_tokens=_int(doc["completion_tokens"]),
            reasoning_tokens=_int(doc["reasoning_tokens"]),
        )


def _int(value: JSON) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value
