"""The strategy contract: what a strategy receives, what it yields.

One ``run`` serves both modes: the server drains it for a JSON response, or
forwards its events as SSE. The last event is always ``Result``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar, runtime_checkable

from core.allowance import Allowance
from core.budget import Budget
from core.engine import Engine, FinishReason, SamplingConfig

T = TypeVar("T")

# A JSON-ready value for the ``thinkgate`` extension object.
JSON = None | bool | int | float | str | Sequence["JSON"] | Mapping[str, "JSON"]

# A budget that can cut a choice short (the budget cut-in metric's label parts).
BudgetName = Literal["thinking", "solution"]


def budget_cuts(*, thinking: bool, solution: bool) -> tuple[BudgetName, ...]:
    """The budgets that cut, in label order (``Choice.budget_cut``)."""
    cuts: list[BudgetName] = []
    if thinking:
        cuts.append("thinking")
    if solution:
        cuts.append("solution")
    return tuple(cuts)


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategyRequest:
    """A validated request, as strategies see it (built by the server from the body)."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    thinking_open: bool  # the prompt leaves <think> open (see strategies.reasoning)
    n: int  # choices the client asked for (OpenAI ``n``)
    sampling: SamplingConfig  # the client's settings; ``n`` there is 1, set per call
    budget: Budget
    stream: bool
    options: Mapping[str, JSON] = field(default_factory=dict)  # strategy-specific body fields
    # The client offered tools: an answer may be tool calls (strategies.tool_calls).
    tools: bool = False


@dataclass(frozen=True, slots=True)
class LogprobEntry:
    """One token's log-probability as a client reads it: the token's text and logprob,
    then the position's most likely tokens (text, logprob), best first. ``logprob`` is
    None only for a prompt's first token, which has nothing before it."""

    token: str
    logprob: float | None
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """One returned choice (a trajectory, or the chosen answer of many)."""

    index: int
    reasoning: str
    content: str
    finish_reason: FinishReason
    info: Mapping[str, JSON] = field(default_factory=dict)  # per-choice thinkgate details
    # The budgets that cut this choice short, in order (empty: none did); None where no
    # budget applies. Rendered as the choice's ``thinkgate.budget_cut`` list.
    budget_cut: tuple[BudgetName, ...] | None = None
    # The client's stop string that ended it, when one did (Anthropic's stop_sequence).
    stop_sequence: str | None = None
    # Per generated token (thinking included) when the client asked for logprobs.
    logprobs: tuple[LogprobEntry, ...] | None = None
    # Completions' ``echo``: the prompt's text, and its tokens' logprobs when logprobs
    # were asked for too.
    echo: str | None = None
    prompt_logprobs: tuple[LogprobEntry, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Exact token counts, summed over every trajectory the strategy drew."""

    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceDelta:
    """Live text of one choice (single-trajectory strategies stream these)."""

    index: int
    reasoning: str = ""
    content: str = ""
    finish_reason: FinishReason | None = None
    # Tokens this choice has generated so far, EOS included (as its usage will count
    # them), when the strategy counts them live; streams with continuous usage read it.
    completion_tokens: int | None = None
    # The logprobs of this delta's tokens when the client asked for them.
    logprobs: tuple[LogprobEntry, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A progress event of a multi-sample strategy (sent as an SSE ``thinkgate.progress``)."""

    data: Mapping[str, JSON]


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """The result. ``samples`` is the number of trajectories drawn."""

    choices: tuple[Choice, ...]
    usage: Usage
    samples: int
    info: Mapping[str, JSON] = field(default_factory=dict)  # merged into ``thinkgate``


StrategyEvent = ChoiceDelta | Progress | Result


@dataclass(frozen=True, slots=True)
class ResourceKey(Generic[T]):
    """The typed name of a server-wide resource: the module that reads it declares the
    key (``TABLE = ResourceKey("pets_table", PetsTable)``), a resource builder attaches a
    value under it (checked against ``kind`` at start-up), ``Resources.get`` returns a
    ``T``. Builders are plugins: entry-point group ``thinkgate.resources``."""

    name: str
    kind: type[T]


# What a resource builder attaches: values by their typed key.
Attached = dict[ResourceKey[Any], object]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """Server-wide things strategies may use, attached at start-up (None: not configured)."""

    items: Mapping[str, object] = field(default_factory=dict)

    def get(self, key: ResourceKey[T]) -> T | None:
        found = self.items.get(key.name)
        return found if isinstance(found, key.kind) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategyContext:
    engine: Engine
    request: StrategyRequest
    resources: Resources = field(default_factory=Resources)
    # The request's total-token ceiling and deadline, which every engine call draws from
    # (``server.pipeline.request_engine``); unlimited unless the request set them.
    allowance: Allowance = field(default_factory=Allowance)


@runtime_checkable
class Strategy(Protocol):
    """A test-time-scaling strategy, registered under ``name`` (entry point group
    ``thinkgate.strategies``)."""

    name: ClassVar[str]
    # Budget fields this strategy honours ("thinking", "solution", "samples", "k");
    # a request that sets another one is a 400 naming it, never silently ignored.
    budget_fields: ClassVar[frozenset[str]]
    # Body fields of its own it reads from ``StrategyRequest.options`` (e.g. ``alpha``);
    # any other field that is neither OpenAI's nor a vLLM sampling field is a 400 naming
    # it, so a misspelt option is never silently ignored.
    body_options: ClassVar[frozenset[str]]
    # Whether it streams live ChoiceDelta events (single trajectory) or progress
    # events then the chosen answer (the server replays Result's choices as chunks).
    streams_live: ClassVar[bool]

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        """Before any engine call; raises ``InvalidRequest``/``InvalidBudget`` on bad input."""
        ...

    def run(self, ctx: StrategyContext) -> AsyncGenerator[StrategyEvent, None]:
        """An async generator of events; the last one is ``Result``."""
        ...
