"""The body of ``POST /v1/responses`` (OpenAI Responses API) and the
chat request it becomes.

Honoured: ``input`` (a string, or a list of messages with ``user`` / ``system`` /
``developer`` / ``assistant`` roles and text parts; ``reasoning`` items given back are
the next assistant message's thinking, read from their ``encrypted_content`` when it is
set; ``function_call`` items given back are the assistant's calls and
``function_call_output`` items the tools' results), ``tools`` (function tools, and the
functions of ``namespace`` groups; hosted tools are left out and named in
``X-Thinkgate-Ignored``) and ``tool_choice`` (``none``, ``auto``, ``required``, a named
function; a hosted tool's is a 400), as chat's, ``parallel_tool_calls`` (``false``: at
most one call, as chat's), ``instructions`` (a system message first),
``max_output_tokens``, ``temperature``, ``top_p``, ``reasoning.effort`` (the effort
table, ``server.pipeline.effort``), ``metadata`` (echoed), ``stream``, ``include``
(``reasoning.encrypted_content``: each reasoning item sealed, ``server.apis.reasoning_seal``);
thinkgate's ``strategy`` and ``budget`` and vLLM's ``seed``, ``top_k``, ``min_p``,
``repetition_penalty`` as on chat; other fields pass on as strategy options. Accepted
and ignored: the fields ``server.apis.openai.sdk_fields`` says so of. ``store`` (omitted: true, as
OpenAI) keeps the response and ``previous_response_id`` continues from a kept one
(``server.apis.responses.store``). A 400 naming the field: ``conversation``, ``background:
true``, ``prompt``, ``top_logprobs``, other item types and non-text content parts.
``text.format`` (``json_object``, ``json_schema``) becomes chat's ``response_format``.

Here: the request and its translation; its input items are in
``server.apis.responses.input_items``, its tools in ``server.apis.responses.tools``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, WithJsonSchema, model_validator

from core.errors import InvalidRequest
from server.apis.chat_translation import to_chat
from server.apis.openai import sdk_fields
from server.apis.openai.protocol import BUDGET_SCHEMA, PositiveInt, Temperature, TopP
from server.apis.openai.validation import Strict, set_fields, validate, validate_json
from server.apis.reasoning_seal import Seal
from server.apis.responses.input_items import ITEM_SCHEMA, ItemReference, chat_messages
from server.apis.responses.render import Echo, ResponsesCall
from server.apis.responses.store import ResponseStore, with_ids
from server.apis.responses.tools import (
    TOOL_SCHEMA,
    NamedFunctionChoice,
    chat_tools,
    functions_of,
)
from server.settings import Effort

ROUTE: Final = "/v1/responses"
# Chat names of the fields errors found later name, as this route calls them.
RENAMES: Final = {
    "reasoning_effort": "reasoning.effort",
    "max_completion_tokens": "max_output_tokens",
    "messages": "input",
    "response_format": "text.format",
}
ENCRYPTED: Final = "reasoning.encrypted_content"
_STATELESS: Final = "thinkgate is stateless: send the whole conversation in input"

# What OpenAI's ``include`` takes (the SDK's ``ResponseIncludable``); any other is a 400.
INCLUDABLE: Final = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    }
)


class Reasoning(Strict):
    effort: Effort | None = None
    # A summary asked for is the reasoning text itself (no summarising model here).
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    # Which turns' reasoning the model sees, and OpenAI's "pro" mode: the reasoning a
    # request gives back is what the model sees here (its chat template decides), and
    # one mode: both accepted, neither changes anything.
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


class TextFormat(Strict):
    """``text.format``: text, any JSON object, or JSON valid against a named schema (the
    Responses API's flat form of chat's ``response_format``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    type: Literal["text", "json_object", "json_schema"]
    name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    description: str | None = None
    json_schema: Annotated[dict[str, JsonValue] | None, Field(alias="schema")] = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _named(self) -> TextFormat:
        if self.type == "json_schema" and self.name is None:
            raise ValueError("a json_schema format needs its name")
        return self

    def as_chat(self) -> dict[str, object] | None:
        """Chat's ``response_format`` for it (None: text)."""
        if self.type == "text":
            return None
        if self.type == "json_object":
            return {"type": "json_object"}
        spec: dict[str, object] = {"name": self.name}
        if self.json_schema is not None:
            spec["schema"] = self.json_schema
        return {"type": "json_schema", "json_schema": spec}

    def echo(self) -> dict[str, object]:
        """The format as a response repeats it."""
        return self.model_dump(by_alias=True, exclude_none=True)


class TextConfig(Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")  # strategy options (module doc)

    model: str
    input: (
        str
        | Annotated[
            list[Annotated[dict[str, JsonValue], WithJsonSchema(ITEM_SCHEMA)]], Field(min_length=1)
        ]
    )
    instructions: str | None = None
    max_output_tokens: PositiveInt | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    reasoning: Reasoning | None = None
    metadata: Annotated[dict[str, str], Field(max_length=16)] | None = None
    stream: bool = False
    stream_options: dict[str, JsonValue] | None = None  # include_obfuscation: nothing to hide
    text: TextConfig | None = None
    # thinkgate (as on chat)
    strategy: str | None = None
    budget: Annotated[dict[str, JsonValue] | None, WithJsonSchema(BUDGET_SCHEMA)] = None
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None
    # Accepted and ignored.
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: int | None = None  # one turn makes the calls of one answer
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, JsonValue] | None = None
    context_management: list[JsonValue] | None = None  # no server-side compaction
    image: dict[str, JsonValue] | None = None
    access_programs: dict[str, JsonValue] | None = None
    # Function tools and namespace groups of them; hosted tools (web search, file search,
    # ...) thinkgate cannot run are left out of the prompt and listed in the
    # X-Thinkgate-Ignored header (``tools.<type>``).
    tools: (
        Annotated[
            list[Annotated[dict[str, JsonValue], WithJsonSchema(TOOL_SCHEMA)]],
            Field(max_length=128),
        ]
        | None
    ) = None
    # A hosted tool's choice (``{"type": "web_search"}``) is a 400: it would force a tool
    # thinkgate cannot run.
    tool_choice: (
        Literal["none", "auto", "required"] | NamedFunctionChoice | dict[str, JsonValue] | None
    ) = None
    # Refused unless neutral (what a stateless server cannot do).
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    conversation: JsonValue = None
    include: list[str] | None = None
    prompt: JsonValue = None
    top_logprobs: int | None = None

    def refuse_stateful(self, stored: Stored | None) -> None:
        unstored = "this server keeps no responses (--response-retention-s 0)"
        refusals = (
            (
                "previous_response_id",
                self.previous_response_id is not None and not stored,
                unstored,
            ),
            ("store", self.store is True and not stored, unstored),
            ("conversation", self.conversation is not None, _STATELESS),
            ("background", self.background is True, "background mode is not supported"),
            (
                "include",
                "message.output_text.logprobs" in (self.include or ()),
                "logprobs are not returned on this route (chat completions returns them)",
            ),
            (
                "include",
                bool(set(self.include or ()) - INCLUDABLE),
                f"include takes {', '.join(sorted(INCLUDABLE))}",
            ),
            ("prompt", self.prompt is not None, "stored prompt templates need stored state"),
            ("top_logprobs", bool(self.top_logprobs), "logprobs are not supported by thinkgate"),
        )
        for param, refused, why in refusals:
            if refused:
                raise InvalidRequest(f"{param}: {why}", param=param)


@dataclass(frozen=True, slots=True)
class Stored:
    """The response store and the owner this request reads and writes as."""

    store: ResponseStore
    owner: str  # what this request stores as (its tenant)
    legacy: str = ""  # what its key stored as before; still read (server.apis.responses.store)

    @property
    def readers(self) -> tuple[str, str]:
        return (self.owner, self.legacy)


def translate(raw: bytes, seal: Seal | None = None, stored: Stored | None = None) -> ResponsesCall:
    """A raw /v1/responses body as the chat request it means (400s name its fields);
    ``seal`` opens the reasoning a client gives back and seals what it asks to carry."""
    body = validate_json(ResponsesRequest, raw)
    body.refuse_stateful(stored)
    given = body.input
    own = (
        [{"role": "user", "content": given}] if isinstance(given, str) else _resolved(given, stored)
    )
    prior: list[dict[str, Any]] = []
    if body.previous_response_id is not None and stored is not None:
        prior = stored.store.conversation(body.previous_response_id, stored.readers)
    if prior or not isinstance(given, str):
        body = body.model_copy(update={"input": [*prior, *own]})
    effort = body.reasoning.effort if body.reasoning else None
    fmt = body.text.format if body.text is not None else None
    tools, tool_choice = chat_tools(body.tools, body.tool_choice)
    fields: dict[str, object] = {
        "model": body.model,
        "messages": chat_messages(body.instructions, body.input, seal),
        "max_completion_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "stream": body.stream,
        "strategy": body.strategy,
        "budget": body.budget,
        "reasoning_effort": effort,
        "seed": body.seed,
        "top_k": body.top_k,
        "min_p": body.min_p,
        "repetition_penalty": body.repetition_penalty,
        "response_format": fmt.as_chat() if fmt is not None else None,
        "tools": tools,
        "tool_choice": tool_choice,
        "parallel_tool_calls": body.parallel_tool_calls,
    }
    chat = to_chat(ROUTE, fields, body.model_extra or {})
    echo = _echo(body, effort, fmt, stored)
    _, hosted = functions_of(body.tools)
    ignored = sdk_fields.ignored(sdk_fields.RESPONSES, set_fields(body))
    ignored += tuple(f"tools.{kind}" for kind in sorted(set(hosted)))
    for kind in ("function_call", "function_call_output"):  # their keys acted on by none
        items = [i for i in own if isinstance(i, dict) and i.get("type") == kind]
        ignored += sdk_fields.part_ignored(f"input.{kind}", f"responses.input.{kind}", items)
    parts = [
        p
        for i in own
        if isinstance(i, dict) and isinstance(content := i.get("content"), list)
        for p in content
    ]
    ignored += sdk_fields.part_ignored("input.content", "responses.content.input_text", parts)
    include = set(body.include or ())
    ignored += tuple(f"include.{x}" for x in sorted(include - {ENCRYPTED}))
    sealing = seal if ENCRYPTED in include else None
    keep = None
    if stored is not None and body.store is not False:  # OpenAI's default: stored
        inputs = with_ids([*prior, *own])

        def keep(response: dict[str, Any]) -> None:
            stored.store.put(response["id"], stored.owner, response, inputs, response["output"])

    return ResponsesCall(
        chat=chat, echo=echo, renames=RENAMES, ignored=ignored, seal=sealing, keep=keep
    )


def _echo(
    body: ResponsesRequest, effort: str | None, fmt: TextFormat | None, stored: Stored | None
) -> Echo:
    """What the response repeats of the request."""
    return Echo(
        instructions=body.instructions,
        max_output_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        effort=effort,
        metadata=dict(body.metadata or {}),
        text_format=fmt.echo() if fmt is not None else {"type": "text"},
        tools=[dict(t) for t in body.tools or []],
        tool_choice=_echo_choice(body),
        # OpenAI's default: parallel calls allowed.
        parallel_tool_calls=body.parallel_tool_calls is not False,
        store=stored is not None and body.store is not False,
        previous_response_id=body.previous_response_id,
        max_tool_calls=body.max_tool_calls,
        summary=(body.reasoning.summary or body.reasoning.generate_summary)
        if body.reasoning
        else None,
        safety_identifier=body.safety_identifier,
        prompt_cache_key=body.prompt_cache_key,
    )


def _resolved(items: list[dict[str, Any]], stored: Stored | None) -> list[dict[str, Any]]:
    """``items`` with each ``item_reference`` replaced by the item it names, read from the
    tenant's stored responses (another tenant's id is not found)."""
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if item.get("type") != "item_reference":
            out.append(item)
            continue
        where = f"input.{i}"
        ref = validate(ItemReference, item, prefix=where).id
        if stored is None:
            raise InvalidRequest(
                f"{where}: item_reference reads stored responses, which this server does not "
                "keep (--response-retention-s 0): send the item itself",
                param=where,
            )
        out.append(stored.store.item(ref, stored.readers, param=f"{where}.id"))
    return out


def _echo_choice(body: ResponsesRequest) -> object:
    """``tool_choice`` as a response repeats it (OpenAI's default: ``auto`` with tools)."""
    choice = body.tool_choice
    if isinstance(choice, NamedFunctionChoice):
        return choice.model_dump()
    return choice if choice is not None else ("auto" if body.tools else "none")
