"""Following the trajectories of one engine request as they stream.

Single-trajectory strategies (``plain``, ``elastic``, ``budget-guidance``) all turn
engine ``SampleDelta``s into live ``ChoiceDelta`` events and, at the end, into
choices with exact usage; this module is that shared part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from core.base import JSON, BudgetName, Choice, ChoiceDelta, LogprobEntry, Result, Usage
from core.engine import FinishReason, ModelTokens, SampleDelta
from strategies.logprobs import Texts
from strategies.reasoning import StreamSplitter


@dataclass(slots=True)
class Trajectory:
    """One trajectory's ids and text so far (mutable while it streams)."""

    index: int
    splitter: StreamSplitter
    token_ids: list[int] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    cumulative_logprob: float | None = None
    logprobs: list[LogprobEntry] | None = None  # when the client asked for them

    @property
    def reasoning_tokens(self) -> int:
        return self.splitter.reasoning_tokens

    @property
    def think_closed(self) -> bool:
        return self.splitter.think_closed

    @property
    def content_tokens(self) -> int:
        """Answer tokens after ``</think>``, EOS excluded."""
        return self.splitter.content_tokens

    def choice(
        self,
        *,
        finish_reason: FinishReason | None = None,
        info: dict[str, JSON] | None = None,
        budget_cut: tuple[BudgetName, ...] | None = None,
    ) -> Choice:
        return Choice(
            index=self.index,
            reasoning="".join(self.reasoning),
            content="".join(self.content),
            finish_reason=finish_reason or self.finish_reason or "abort",
            info=info or {},
            budget_cut=budget_cut,
            stop_sequence=self.stop_reason if isinstance(self.stop_reason, str) else None,
            logprobs=None if self.logprobs is None else tuple(self.logprobs),
        )


@dataclass(frozen=True, slots=True)
class Ending:
    """How a finished trajectory ended, as its strategy judges it."""

    finish_reason: FinishReason
    info: dict[str, JSON]  # per-choice details
    budget_cut: tuple[BudgetName, ...] | None = None  # as ``Choice.budget_cut``


Outcome = Callable[[Trajectory], Ending]


class TrajectorySet:
    """Routes the deltas of an ``n``-sample request to their trajectories.

    ``index_offset`` shifts engine indices, so several engine requests can feed
    one response's choices.
    """

    def __init__(self, tokens: ModelTokens, *, thinking_open: bool) -> None:
        self._tokens = tokens
        self._texts = Texts(tokens)
        self._thinking_open = thinking_open
        self.by_index: dict[int, Trajectory] = {}

    def get(self, index: int) -> Trajectory:
        traj = self.by_index.get(index)
        if traj is None:
            splitter = StreamSplitter(self._tokens, thinking_open=self._thinking_open)
            traj = self.by_index[index] = Trajectory(index=index, splitter=splitter)
        return traj

    def push(self, delta: SampleDelta, *, index: int | None = None) -> ChoiceDelta | None:
        """Feed one delta; the live event to send: one per delta that carried tokens or
        text, even when its text is empty (a special token, a delimiter, bytes of a
        character not complete yet). vLLM's server streams a chunk per engine output
        the same way, and clients time tokens by chunks: vLLM's benchmark client counts
        an empty chunk as a token and a skipped one as a gap twice as long."""
        key = delta.index if index is None else index
        if delta.redrawn:  # an unseen trajectory's server failed: it starts again
            self.by_index.pop(key, None)
            return None
        traj = self.get(key)
        traj.token_ids.extend(delta.token_ids)
        entries = None if delta.logprobs is None else self._texts.entries(delta.logprobs)
        if entries is not None:
            if traj.logprobs is None:
                traj.logprobs = []
            traj.logprobs.extend(entries)  # in place: a long stream stays linear
        text = traj.splitter.push(delta.token_ids)
        reasoning, content = text.reasoning, text.content
        if delta.finish_reason is not None:
            tail = traj.splitter.flush()
            reasoning += tail.reasoning
            content += tail.content
            traj.finish_reason = delta.finish_reason
            traj.stop_reason = delta.stop_reason
            traj.cumulative_logprob = delta.cumulative_logprob
        traj.reasoning.append(reasoning)
        traj.content.append(content)
        if not reasoning and not content and not delta.token_ids:
            return None
        return ChoiceDelta(
            index=traj.index,
            reasoning=reasoning,
            content=content,
            completion_tokens=traj.splitter.completion_tokens,
            logprobs=entries,
        )

    def usage(self, prompt_tokens: int) -> Usage:
        """Exact usage over every trajectory; the prompt counted once per engine request."""
        return Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=sum(t.splitter.completion_tokens for t in self.by_index.values()),
            reasoning_tokens=sum(t.reasoning_tokens for t in self.by_index.values()),
        )

    def ordered(self) -> list[Trajectory]:
        return [self.by_index[i] for i in sorted(self.by_index)]

    def final(self, prompt_tokens: int, outcome: Outcome, info: Mapping[str, JSON]) -> Result:
        """The result: a choice per trajectory, finish reason and details from ``outcome``;
        the details of every choice are also listed in ``info["choices"]``."""
        choices: list[Choice] = []
        details: list[JSON] = []
        for traj in self.ordered():
            end = outcome(traj)
            choices.append(
                traj.choice(
                    finish_reason=end.finish_reason, info=end.info, budget_cut=end.budget_cut
                )
            )
            cut: JSON = list(end.budget_cut) if end.budget_cut is not None else None
            details.append(
                {**end.info, "budget_cut": cut} if end.budget_cut is not None else end.info
            )
        return Result(
            choices=tuple(choices),
            usage=self.usage(prompt_tokens),
            samples=len(choices),
            info={**info, "choices": details},
        )
