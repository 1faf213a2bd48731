"""What strategies need from an engine: values in, values out, and the protocol.

The protocol lives here (not in ``server/``) because imports point one way,
``kernels`` <- ``strategies`` <- ``server``: strategies call engines, the server
builds them. ``engines`` implements it (``LocalEngine`` over vLLM's
``AsyncLLM``) and re-exports the names.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, TypeVar, runtime_checkable

from core.errors import first_error

T = TypeVar("T")

FinishReason = Literal["stop", "length", "abort"]
ExtraArg = int | float | str

QUIET_STREAM_INTERVAL: Final = 64
"""Tokens per delta an engine may batch on a stream that is not ``visible`` (vLLM's
``stream_interval``: a sample's first token and its end still come at once). Nobody
reads such a stream token by token, and every delta costs each hop (the engine's output
loop, a router, the gateway) CPU: 96-token samples through vLLM's router cost it about
10 ms of CPU per question as one frame per token."""


MAX_CLIENT_LOGPROBS: Final = 20
"""The most alternatives per token a client may ask for (OpenAI's ``top_logprobs`` cap;
vLLM's default ``max_logprobs`` too)."""


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One position's log-probabilities as the client asked for them: the token there
    and its logprob, then the position's ``k`` most likely tokens, best first (empty
    when ``k`` is 0)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StructuredOutput:
    """A constraint on the answer (OpenAI's ``response_format``), applied by the engine's
    grammar once thinking has ended: any JSON object, or JSON valid against a schema."""

    kind: Literal["json_object", "json_schema"]
    # The JSON Schema as canonical JSON text (hashable, sent as is); None for json_object.
    schema: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingConfig:
    """Sampling settings of one engine request (maps 1:1 onto vLLM ``SamplingParams``)."""

    n: int = 1
    max_tokens: int | None = None  # None: up to the model's context
    temperature: float = 1.0
    top_p: float = 1.0
    # vLLM's sampling extras, as its clients send them (neutral by default).
    top_k: int = 0  # 0 (or -1): every token
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    # OpenAI's penalties (-2 to 2) over the tokens a sample generated so far, and its
    # additive bias per token id (-100 to 100): vLLM applies them per sample.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    min_tokens: int = 0  # EOS and stop tokens are held back until this many tokens
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = False  # per-token logprob of the sampled token
    # k > 0: the engine reports each generated token's confidence over its top-k
    # candidates (DeepConf); at most core.token_confidence.MAX_TOP_K.
    top_logprobs: int = 0
    # The client's logprobs (OpenAI ``logprobs``/``top_logprobs``): None, none; k >= 0,
    # each generated token's logprob and its k most likely alternatives
    # (``Sample.logprobs``); at most MAX_CLIENT_LOGPROBS.
    token_logprobs: int | None = None
    # The same for every prompt token (completions' ``echo``; ``Sample.prompt_logprobs``).
    prompt_logprobs: int | None = None
    # Keep sampling past EOS up to max_tokens (fixed-length load tests, abort tests).
    ignore_eos: bool = False
    # The answer's grammar (None: free text); the thinking before it stays free.
    structured: StructuredOutput | None = None
    # Arguments for our logits processors (kernels/elastic/args.py names the keys).
    extra_args: Mapping[str, ExtraArg] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateRequest:
    """One engine request: ``n`` samples of one prompt share its KV cache."""

    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingConfig
    # Whether the caller forwards this stream's tokens to the client as they arrive.
    # False (a sample pool, a non-streamed answer) lets an engine that loses a server
    # mid-way draw the unfinished samples again elsewhere (``SampleDelta.redrawn``);
    # True: tokens the client saw cannot be taken back, so the stream ends in an error.
    visible: bool = True
    # Calls with one key belong to one client request (its samples and follow-ups share
    # a prompt): a router in front of the fleet keeps them on one replica. None: no key.
    affinity: str | None = None
    # The tenant the call is for (``server.tenancy.tenants``): a fleet's router weighs tenants
    # by it (llm-d's fairness id). The same for every sample of a request. None: unknown.
    tenant: str | None = None
    # What the call serves, as llm-d's objectives name it: ``interactive`` (a client
    # waits), ``batch`` (a Batch API line). None: unknown.
    objective: str | None = None
    # The call draws thinking only and a later call of the request answers (a search's
    # steps, two-pass's first pass): a request's ceiling and deadline keep the answer's
    # share back from it (``core.allowance``).
    thinking_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One finished trajectory, by token ids (text is derived by ``ModelTokens``)."""

    index: int
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    # Sum of the sampled tokens' logprobs when ``SamplingConfig.logprobs`` was set.
    cumulative_logprob: float | None = None
    # Which stop string or stop token ended it, if any (vLLM's ``stop_reason``).
    stop_reason: int | str | None = None
    # Per generated token (as long as ``token_ids``) when ``SamplingConfig.top_logprobs``
    # was set: ``core.token_confidence.token_confidence`` of its top-k logprobs.
    confidences: tuple[float, ...] | None = None
    # One per generated token when ``SamplingConfig.token_logprobs`` was set.
    logprobs: tuple[TokenLogprob, ...] | None = None
    # One per prompt token when ``SamplingConfig.prompt_logprobs`` was set (None first:
    # the first token has nothing before it).
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleDelta:
    """New tokens of one trajectory while streaming (``finish_reason`` on its last delta)."""

    index: int
    token_ids: tuple[int, ...]
    finish_reason: FinishReason | None = None
    cumulative_logprob: float | None = None
    stop_reason: int | str | None = None
    # The confidences of this delta's ``token_ids`` (one each), as in ``Sample``.
    confidences: tuple[float, ...] | None = None
    # The client's logprobs of this delta's ``token_ids`` (one each), as in ``Sample``.
    logprobs: tuple[TokenLogprob, ...] | None = None
    # Only on streams that are not ``visible``: the server drawing this sample failed
    # before it finished, and the engine draws it again from its start. The consumer
    # forgets the index's tokens so far; ``lost_tokens`` of them were generated (the
    # gateway bills them). Fresh deltas for the index follow.
    redrawn: bool = False
    lost_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLoad:
    """How full an engine is now, as far as this gateway can tell: it runs ``rows``
    sequences at once, this gateway has ``busy`` of them in flight, ``waiting`` more are
    queued behind (0 when unknown)."""

    rows: int
    busy: int
    waiting: int = 0

    @property
    def free(self) -> int:
        """Rows a new draw gets at once (0 while anything waits)."""
        return 0 if self.waiting > 0 else max(0, self.rows - self.busy)


@runtime_checkable
class ModelTokens(Protocol):
    """The tokenizer facts strategies rely on, resolved once at start-up.

    Think-token ids come from the tokenizer, never hard-coded; an engine for a
    reasoning model refuses to start when they are missing. A delimiter is a token
    *sequence* (``</think>`` may be several BPE tokens; gpt-oss's channel hand-over
    always is); ``think_*_id`` is its id when it is exactly one token, the fast path
    most models take.
    """

    think_start_ids: tuple[int, ...]  # empty: not a reasoning model
    think_end_ids: tuple[int, ...]
    think_start_id: int | None  # the single id when the delimiter is one token, else None
    think_end_id: int | None
    eos_token_ids: tuple[int, ...]
    vocab_size: int  # token ids run 0 .. vocab_size - 1 (added tokens included)

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` with special tokens left out."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of plain text (no special tokens added)."""
        ...

    def token_text(self, token_id: int) -> str:
        """One token's text, a special token's included (``</think>``): what a client's
        logprobs name it by."""
        ...

    def render_chat(
        self,
        messages: Sequence[Mapping[str, object]],
        tools: Sequence[Mapping[str, object]] | None = None,
    ) -> list[int]:
        """Prompt ids for a chat, generation prompt included (thinking opened if the
        template opens it); ``tools`` offered as the template writes them."""
        ...


@runtime_checkable
class Engine(Protocol):
    """How the gateway talks to a vLLM engine, local or remote.

    Cancelling the task that awaits ``generate`` or iterates ``stream`` aborts
    the engine request (all of its ``n`` samples).
    """

    model_name: str
    tokens: ModelTokens

    @property
    def max_model_len(self) -> int:
        """Context length (prompt + completion) of the served model."""
        ...

    @property
    def processors(self) -> frozenset[str]:
        """Our logits processors this engine has loaded (kernels/ names: "elastic", ...);
        a remote engine reports those every admitted server has."""
        ...

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        """All ``n`` samples, finished, ordered by index."""
        ...

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        """What ``generate`` gives each of ``requests``, in order, the calls submitted
        together (a step of every path of a search): an in-process engine schedules them
        in one step anyway; a remote one sends those that can share a call as one.
        Cancelling aborts every request."""
        ...

    def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        """Deltas as tokens are sampled; every index ends with a finish_reason."""
        ...

    def load(self) -> EngineLoad | None:
        """How full the engine is now (None: unknown); adaptive strategies size their
        rounds by it."""
        ...

    async def health(self) -> None:
        """Returns when the engine serves; raises ``BackendUnavailable`` otherwise."""
        ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True, eq=False)
class ServedModel:
    """The served model as a resource builder sees it (``server.resources.builders``): its name and
    tokenizer, known before its engine is up, and the engine once it is. On a CPU host
    the gateway builds the resources while the generator's engine starts, so that the
    reward model's and the PRM's engines start beside it instead of after it; a builder
    that needs the engine itself (the PETS batch jobs) awaits :meth:`engine`."""

    model_name: str
    tokens: ModelTokens
    started: asyncio.Future[Engine]

    @classmethod
    def of(cls, engine: Engine) -> ServedModel:
        """An engine already up."""
        started: asyncio.Future[Engine] = asyncio.get_running_loop().create_future()
        started.set_result(engine)
        return cls(model_name=engine.model_name, tokens=engine.tokens, started=started)

    async def engine(self) -> Engine:
        """The engine, once it has started (cancelled if its start failed)."""
        return await asyncio.shield(self.started)


async def all_of(calls: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Every call at once, results in order. The first failure cancels the others and
    is raised itself: ``asyncio.TaskGroup`` would wrap it in an ``ExceptionGroup``, which
    the error handler cannot map (a 503 would reach the client as a 500)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in calls]
    except BaseExceptionGroup as failed:
        raise first_error(failed) from failed
    return [t.result() for t in tasks]


async def generate_each(
    generate: Callable[[GenerateRequest], Coroutine[Any, Any, list[Sample]]],
    requests: Sequence[GenerateRequest],
) -> list[list[Sample]]:
    """``generate`` of every request at once: ``Engine.generate_batch`` for an engine
    whose calls batch by themselves."""
    return await all_of(generate(r) for r in requests)
