"""Request bodies of the OpenAI surface (pydantic stays here, at the edge).

Bodies are validated strictly from raw JSON: ``"5"`` is not an int and ``true`` is not
1. Every field a body may carry is one of: an OpenAI field we honour; an OpenAI field that
is harmless to ignore (``store``, ``metadata`` ...); an OpenAI feature we do
not implement (``UNSUPPORTED``: a 400 naming it unless neutral); one of vLLM's sampling
extras its clients send (``top_k``, ``min_p``, ``repetition_penalty``, ``min_tokens``:
passed to the engine, like OpenAI's ``presence_penalty``, ``frequency_penalty`` and
``logit_bias``); the client's ``logprobs`` (and completions' ``echo``) and chat's
``response_format``, which the serving layer checks against the strategy; or an option
of the chosen strategy (``Strategy.body_options``, checked by ``Registry.check_options``
once the strategy is known). Anything else is a client's own field, ignored and listed,
unless it is a near miss of one of thinkgate's names (a 400 naming it). Responses are
built as plain dicts in ``server/apis/openai/render.py``.

Here: the chat and completions requests and their shared fields; a chat request's
messages, tools and formats are in ``server.apis.openai.chat_parts``, and the strict
reading of a raw body in ``server.apis.openai.validation``.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, TypeVar, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
)

from core.engine import MAX_CLIENT_LOGPROBS
from core.errors import InvalidRequest
from server.apis.openai import sdk_fields
from server.apis.openai.chat_parts import ChatMessage, NamedToolChoice, ResponseFormat, ToolDef
from server.apis.openai.validation import validate_json
from server.settings import Effort

Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
PositiveInt = Annotated[int, Field(ge=1)]
Stop = str | Annotated[list[str], Field(max_length=16)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0, allow_inf_nan=False)]
Bias = Annotated[float, Field(ge=-100.0, le=100.0, allow_inf_nan=False)]
LOGIT_BIAS_MAX = 1024  # token ids one request may bias (OpenAI allows 300)
_BIAS_DOC = "Token id (decimal string) -> bias added to its logit before sampling."

# The body ``budget`` as server/pipeline/budgets.py checks it (validation there names the field and
# its source); pydantic only sees a JSON object, so the published schema is spelled out.
_COUNT: dict[str, JsonValue] = {"type": "integer", "minimum": 1}
_TOKENS: dict[str, JsonValue] = {"type": "integer", "minimum": 0}
BUDGET_SCHEMA: dict[str, JsonValue] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {
                "thinking": {**_TOKENS, "description": "thinking tokens per sample"},
                "solution": {**_TOKENS, "description": "answer tokens per sample"},
                "samples": {**_COUNT, "description": "trajectories drawn"},
                "k": {**_COUNT, "description": "answers returned (pass@k), <= samples"},
                "tokens": {
                    **_COUNT,
                    "description": "completion tokens of the whole request (every sample, "
                    "step and answer), at least the answer's reserve",
                },
                "deadline_ms": {
                    **_COUNT,
                    "description": "milliseconds from the request's arrival to its last byte",
                },
                "thinking_min": {
                    **_TOKENS,
                    "description": "thinking tokens per sample before thinking may end",
                },
            },
            "additionalProperties": False,
        },
        {"type": "null"},
    ],
    "description": "Budget per field; an X-Budget-* header wins over its field here.",
}

# OpenAI fields accepted and ignored: they change nothing about the answer (storage,
# tracing and routing hints of OpenAI's platform).
_IGNORED_DOC = "Accepted and ignored (OpenAI platform field)."

# Set to anything but their neutral value, these are refused (we cannot honour them).
# A request model that declares one of these fields honours it instead (completions'
# ``logprobs`` and ``echo``, chat's ``logprobs`` and ``top_logprobs``).
UNSUPPORTED: dict[str, object] = {
    "tools": None,
    "tool_choice": None,
    "functions": None,
    "function_call": None,
    "response_format": None,
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "suffix": None,
    "best_of": (None, 1),
}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False
    # OpenAI pads its chunks against length side channels; nothing here to pad.
    include_obfuscation: bool | None = None
    # vLLM's extension (GuideLLM sends it on every streamed request): with include_usage,
    # every chunk carries the usage so far, as vLLM's server does (server/pipeline/streaming.py).
    continuous_usage_stats: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    n: PositiveInt = 1
    max_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] | None = None  # vLLM's range (int64)
    stop: Stop | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # thinkgate: strategy and budget (headers take precedence; see server/pipeline/budgets.py)
    strategy: str | None = None
    budget: Annotated[dict[str, JsonValue] | None, WithJsonSchema(BUDGET_SCHEMA)] = None
    reasoning_effort: Effort | None = None
    user: str | None = None
    parallel_tool_calls: Annotated[
        bool | None,
        Field(
            description="false: at most one tool call per answer (the first the model "
            "writes; tool_choice required is held to one by the grammar). Default: any number."
        ),
    ] = None
    # OpenAI platform fields, accepted and ignored.
    store: Annotated[bool | None, Field(description=_IGNORED_DOC)] = None
    metadata: Annotated[dict[str, str] | None, Field(description=_IGNORED_DOC)] = None
    service_tier: Annotated[str | None, Field(description=_IGNORED_DOC)] = None
    prompt_cache_key: Annotated[str | None, Field(description=_IGNORED_DOC)] = None
    safety_identifier: Annotated[str | None, Field(description=_IGNORED_DOC)] = None
    # vLLM's prefix cache keeps every prompt it can; a retention or a mode asks nothing more.
    prompt_cache_retention: Annotated[str | None, Field(description=_IGNORED_DOC)] = None
    prompt_cache_options: Annotated[
        dict[str, JsonValue] | None, Field(description=_IGNORED_DOC)
    ] = None
    # vLLM's extensions, as vLLM's own server takes them (its clients send them).
    ignore_eos: bool = False  # sample up to max_tokens regardless of EOS
    top_k: Annotated[int, Field(ge=-1, description="vLLM: 0 or -1 keeps every token")] = 0
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0
    min_tokens: Annotated[int, Field(ge=0)] = 0
    # OpenAI's sampling controls, applied by vLLM to every sample of every strategy.
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: (
        Annotated[dict[str, Bias], Field(max_length=LOGIT_BIAS_MAX, description=_BIAS_DOC)] | None
    ) = None

    def logit_bias_ids(self) -> dict[int, float]:
        """``logit_bias`` keyed by token id; 400 naming ``logit_bias`` for a key that is
        not a token id (the vocabulary bound is the serving layer's check)."""
        out: dict[int, float] = {}
        for key, value in (self.logit_bias or {}).items():
            if not (key.isascii() and key.isdigit()) or len(key) > 10:  # ids < 2**31
                raise InvalidRequest(
                    f"logit_bias keys are token ids (decimal strings); got {key!r}",
                    param="logit_bias",
                )
            out[int(key)] = value
        return out

    @property
    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def options(self) -> dict[str, JsonValue]:
        """Unknown body fields, for strategies (``StrategyRequest.options``)."""
        extra = self.model_extra or {}
        return {k: v for k, v in extra.items() if k not in UNSUPPORTED}

    def refuse_unsupported(self) -> None:
        for key, neutral in UNSUPPORTED.items():
            value = (self.model_extra or {}).get(key)
            allowed = neutral if isinstance(neutral, tuple) else (neutral,)
            if value not in allowed:
                raise InvalidRequest(f"{key} is not supported by thinkgate", param=key)


# vLLM's sampling fields, as _Common declares them: a near miss of one is a misspelling
# (a 400 naming it), not a client's own field to ignore.
VLLM_FIELDS: Final = ("ignore_eos", "top_k", "min_p", "repetition_penalty", "min_tokens")

M = TypeVar("M", bound=_Common)


class ErrorDetail(BaseModel):
    """The inside of every error answer (``core.errors.GatewayError.envelope``)."""

    message: str
    type: str
    param: str | None = Field(description="the offending field or header, when one is")
    code: str | None


class ErrorEnvelope(BaseModel):
    """Every error answer's body: the OpenAI error envelope (documentation only: errors
    are built by ``GatewayError.envelope``)."""

    error: ErrorDetail


TopLogprobs = Annotated[int, Field(ge=0, le=MAX_CLIENT_LOGPROBS)]


class ChatCompletionRequest(_Common):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    # Set by a translation, never by a client: a max_tokens past the room the prompt
    # leaves is cut to that room (Anthropic's rule) instead of a 400 (OpenAI's and vLLM's).
    _cap_to_context: bool = PrivateAttr(default=False)
    max_completion_tokens: PositiveInt | None = None
    # Per generated token (thinking included, as vLLM's server): its logprob, and with
    # top_logprobs its most likely alternatives.
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    # JSON answers (the thinking before them stays free): the engine's grammar.
    response_format: ResponseFormat | None = None
    # Tools the chat template offers the model; its calls come back as tool_calls.
    tools: Annotated[list[ToolDef], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _choice_offered(cls, value: object) -> object:
        return sdk_fields.refuse_part("chat.tool_choice", value)

    # Accepted and ignored: how long OpenAI's models write (the model here is not asked to
    # be briefer; Responses' text.verbosity the same) and a predicted output (a latency
    # hint: the answer is the same without it).
    verbosity: Annotated[
        Literal["low", "medium", "high"] | None, Field(description=_IGNORED_DOC)
    ] = None
    prediction: Annotated[dict[str, JsonValue] | None, Field(description=_IGNORED_DOC)] = None
    # Text out, always: ["text"] is what happens; audio is refused (no audio model).
    modalities: list[Literal["text"]] | None = None

    def offered_tools(self) -> list[dict[str, object]] | None:
        """The tools as the chat template reads them (None: none offered, or
        ``tool_choice: none``, which keeps them from the model)."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def client_logprobs(self) -> int | None:
        """Alternatives per token the client asked for (None: no logprobs)."""
        if self.top_logprobs is not None and not self.logprobs:
            raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_Common):
    # As in OpenAI's API: one prompt (text or token ids) or a list of them, answered as
    # one response whose choices come prompt by prompt (lm-eval batches this way).
    prompt: (
        str
        | Annotated[list[int], Field(min_length=1)]
        | Annotated[list[str], Field(min_length=1)]
        | Annotated[list[Annotated[list[int], Field(min_length=1)]], Field(min_length=1)]
    )
    # OpenAI's legacy completions: each token's logprob and its ``logprobs`` most likely
    # alternatives (0 still gives the token's own); ``echo`` puts the prompt before the
    # answer (with logprobs: the prompt's tokens' logprobs too, what
    # lm-evaluation-harness reads for log-likelihood tasks).
    logprobs: TopLogprobs | None = None
    echo: bool = False

    def client_logprobs(self) -> int | None:
        return self.logprobs

    @property
    def prompts(self) -> list[str | list[int]]:
        """The prompts, one or many, in order."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [cast(list[int], p)]
        return list(cast(list[str] | list[list[int]], p))


OpenAIBody = ChatCompletionRequest | CompletionRequest


def parse_body(model: type[M], raw: bytes) -> M:
    """Validate a raw JSON body; any problem is an ``InvalidRequest`` naming the field."""
    body = validate_json(model, raw)
    body.refuse_unsupported()
    return body
