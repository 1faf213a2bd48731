"""Every field the installed SDKs send is decided (``server.apis.openai.sdk_fields``), and the 2026
knobs do what they say, through the real SDKs on the app over a scripted engine (fast).

A field a new SDK release adds fails ``test_every_sdk_field_is_decided`` until it is
decided; an ignored field is accepted and listed in ``X-Thinkgate-Ignored``; a refused
one is a 400 naming it."""

from __future__ import annotations

import inspect
import json
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, NotRequired, Required

import anthropic
import anthropic.resources.beta.messages as beta_messages
import anthropic.resources.messages as messages_resource
import anthropic.types as at
import openai
import openai.resources.chat.completions as chat_resource
import openai.resources.completions as completions_resource
import openai.resources.responses as responses_resource
import openai.types.chat as oc
import openai.types.responses as orr
import openai.types.shared_params as oshared
import pytest
from openai.types.chat import completion_create_params as ccp

import server.apis.messages.content as mc
import server.apis.messages.request as mr
import server.apis.responses.input_items as ri
import server.apis.responses.request as rr
import server.apis.responses.tools as rt
from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.apis.openai.chat_parts import (
    ChatMessage,
    FunctionDef,
    JsonObjectFormat,
    JsonSchemaFormat,
    JsonSchemaSpec,
    NamedToolChoice,
    TextFormat,
    TextPart,
    ToolDef,
)
from server.apis.openai.protocol import StreamOptions
from server.apis.openai.sdk_fields import APIS, HEADER, MESSAGES, PART_FIELDS, PARTS

THOUGHT = "3+4=7\n"
ANSWER = f"{THOUGHT}</think>\\boxed{{7}}"
JSON_ANSWER = f'{THOUGHT}</think>{{"answer": 7}}'
Q = "Compute 3+4 mod 10."
MSG = [{"role": "user", "content": Q}]
SKIP = {"self", "extra_headers", "extra_query", "extra_body", "timeout"}

CREATE = {
    "chat.completions": chat_resource.Completions.create,
    "completions": completions_resource.Completions.create,
    "responses": responses_resource.Responses.create,
    "messages": messages_resource.Messages.create,
}


def _handler(tokens: Any, text: str = ANSWER) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *[text] * request.sampling.n)

    return handler


def test_every_sdk_field_is_decided() -> None:
    for api, create in CREATE.items():
        sent = set(inspect.signature(create).parameters) - SKIP
        undecided = sorted(sent - set(APIS[api]))
        assert not undecided, f"{api}: decide {undecided} in server/apis/openai/sdk_fields.py"
    # Harnesses send the beta namespace's fields too (``betas`` is a header).
    beta = set(inspect.signature(beta_messages.Messages.create).parameters) - SKIP - {"betas"}
    assert not sorted(beta - set(MESSAGES)), "decide the beta Messages fields"
    for table in APIS.values():
        for name, decided in table.items():
            assert decided.decision != "refused" or decided.note, f"{name}: say why"


# --- the parts inside requests (messages, blocks, tools, items, choices)


def _members(tp: Any) -> list[Any]:
    """The TypedDicts of an SDK union (its literal strings left out)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(tp) for m in _members(a)]
    if typing.get_origin(tp) is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    return [tp] if hasattr(tp, "__required_keys__") else []


def _kinds(td: Any, key: str) -> tuple[str, ...]:
    """The wire values of ``td``'s discriminating ``key`` (``type`` or ``role``)."""

    def values(hint: Any) -> list[str]:
        if typing.get_origin(hint) in (Required, NotRequired, typing.Annotated):
            return values(typing.get_args(hint)[0])
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # Optional[...]
            return [v for a in typing.get_args(hint) for v in values(a)]
        return [a for a in typing.get_args(hint) if isinstance(a, str)]

    # Anthropic's client tool is the one whose type may be left out: "custom".
    return tuple(values(typing.get_type_hints(td, include_extras=True)[key])) or ("custom",)


def _keys(td: Any) -> set[str]:
    return set(td.__required_keys__) | set(td.__optional_keys__)


def _fields(model: Any) -> set[str]:
    return {f.alias or n for n, f in model.model_fields.items()}


# (part, the SDK's union, its discriminating key, the route's model per honoured kind,
# the kind every other type falls under or None)
_CHAT_ROLES = dict.fromkeys(("developer", "system", "user", "assistant", "tool"), ChatMessage)
PART_SOURCES: list[tuple[str, Any, str, dict[str, Any], str | None]] = [
    (
        "messages.role",
        at.MessageParam,
        "role",
        dict.fromkeys(("user", "assistant", "system"), mc.Message),
        None,
    ),
    (
        "messages.content",
        at.ContentBlockParam,
        "type",
        {
            "text": mc.TextBlock,
            "thinking": mc.ThinkingBlock,
            "redacted_thinking": mc.RedactedThinking,
            "tool_use": mc.ToolUseBlock,
            "tool_result": mc.ToolResultBlock,
        },
        None,
    ),
    ("messages.tools", at.ToolUnionParam, "type", {"custom": mr.Tool}, "server"),
    (
        "messages.thinking",
        at.ThinkingConfigParam,
        "type",
        {
            "enabled": mr.ThinkingEnabled,
            "disabled": mr.ThinkingOff,
            "adaptive": mr.ThinkingAdaptive,
        },
        None,
    ),
    (
        "messages.tool_choice",
        at.ToolChoiceParam,
        "type",
        dict.fromkeys(("auto", "any", "tool", "none"), mr.ToolChoice),
        None,
    ),
    ("chat.role", oc.ChatCompletionMessageParam, "role", _CHAT_ROLES, None),
    ("chat.content", oc.ChatCompletionContentPartParam, "type", {"text": TextPart}, None),
    ("chat.tools", oc.ChatCompletionToolUnionParam, "type", {"function": ToolDef}, None),
    (
        "chat.tool_choice",
        oc.ChatCompletionToolChoiceOptionParam,
        "type",
        {"function": NamedToolChoice},
        None,
    ),
    (
        "chat.response_format",
        ccp.ResponseFormat,
        "type",
        {"text": TextFormat, "json_object": JsonObjectFormat, "json_schema": JsonSchemaFormat},
        None,
    ),
    (
        "responses.input",
        orr.ResponseInputItemParam,
        "type",
        {
            "message": ri.InputMessage,
            "function_call": ri.FunctionCallInput,
            "function_call_output": ri.FunctionCallOutput,
            "reasoning": ri.ReasoningInput,
            "item_reference": ri.ItemReference,
        },
        None,
    ),
    (
        "responses.content",
        orr.ResponseInputContentParam,
        "type",
        {"input_text": ri.InputText},
        None,
    ),
    (
        "responses.content",
        orr.response_output_message_param.Content,
        "type",
        {"output_text": ri.InputText},
        None,
    ),
    (
        "responses.tools",
        orr.ToolParam,
        "type",
        {"function": rt.FunctionTool, "namespace": rt.NamespaceTool},
        "hosted",
    ),
    (
        "responses.tool_choice",
        orr.response_create_params.ToolChoice,
        "type",
        {"function": rt.NamedFunctionChoice},
        "hosted",
    ),
]


def test_every_part_inside_a_request_is_decided() -> None:
    # The SDKs' parts (their unions' members): each kind honoured by a model that holds
    # every key of the SDK's type (or PART_FIELDS decides the key), left out, or refused
    # with a reason. A part or key a new SDK release adds fails here until decided.
    for part, union, key, models, other in PART_SOURCES:
        table = PARTS[part]
        for td in _members(union):
            for kind in _kinds(td, key):
                decided = table.get(kind) or (table[other] if other else None)
                assert decided is not None, f"{part}: decide {kind!r} ({td.__name__})"
                if decided.decision == "refused":
                    assert decided.note, f"{part}.{kind}: say why"
                    continue
                model = models.get(kind)
                if model is None:  # left out whole (a server or hosted tool)
                    assert decided.decision == "ignored", (part, kind)
                    continue
                extra = PART_FIELDS.get(f"{part}.{kind}", {})
                undecided = sorted(_keys(td) - _fields(model) - set(extra))
                assert not undecided, f"{part}.{kind}: decide {undecided} ({td.__name__})"
    for decided_fields in PART_FIELDS.values():
        for name, decided in decided_fields.items():
            assert decided.decision != "refused" or decided.note, name
    # The nested objects of one shape each.
    for td, model in [
        (at.OutputConfigParam, mr.OutputConfig),
        (at.JSONOutputFormatParam, mr.OutputFormat),
        (oshared.FunctionDefinition, FunctionDef),
        (oshared.response_format_json_schema.JSONSchema, JsonSchemaSpec),
        (oshared.Reasoning, rr.Reasoning),
        (orr.ResponseTextConfigParam, rr.TextConfig),
        (oc.ChatCompletionStreamOptionsParam, StreamOptions),
    ]:
        assert not sorted(_keys(td) - _fields(model)), f"decide {td.__name__}'s keys"


@pytest.mark.parametrize(
    ("route", "body", "words"),
    [
        (
            "/v1/chat/completions",
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ]
            },
            "describe the image in text",
        ),
        (
            "/v1/chat/completions",
            {"messages": MSG, "tools": [{"type": "custom", "custom": {"name": "c"}}]},
            "free-form",
        ),
        (
            "/v1/chat/completions",
            {"messages": MSG, "tool_choice": {"type": "allowed_tools", "allowed_tools": {}}},
            "allowed tools as tools",
        ),
        (
            "/v1/chat/completions",
            {"messages": [*MSG, {"role": "assistant", "audio": {"id": "a"}}, *MSG]},
            "audio",
        ),
        (
            "/v1/responses",
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "describe the image in text",
        ),
        (
            "/v1/responses",
            {"input": [{"type": "shell_call", "call_id": "c", "action": {}}]},
            "runs no hosted tools",
        ),
        (
            "/v1/messages",
            {
                "max_tokens": 64,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            "describe the document in text",
        ),
        (
            "/v1/messages",
            {"max_tokens": 64, "messages": MSG, "thinking": {"type": "between_tools"}},
            "adaptive or enabled",
        ),
    ],
)
async def test_refused_parts_say_why(
    scripted_app: Callable[..., Any],
    testbed_tokens: Any,
    route: str,
    body: dict[str, Any],
    words: str,
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        r = await app.client.post(route, json={"model": app.model, **body})
        assert app.engine.calls == []
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"], r.text


async def test_parts_keys_accepted_without_acting_are_listed(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    text = {"type": "text", "text": Q, "prompt_cache_breakpoint": {"mode": "explicit"}}
    chat = [
        {"role": "user", "content": [text]},
        {"role": "assistant", "content": "7", "refusal": "no"},
        {"role": "user", "content": Q},
    ]
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "7"}
    items = [
        {"role": "user", "content": Q},
        {**call, "async": False, "caller": {"type": "direct"}, "namespace": "math"},
        {**output, "name": "f", "namespace": "math"},
    ]
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "messages": chat}
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.headers[HEADER] == "messages.refusal, messages.content.prompt_cache_breakpoint"
        r = await app.client.post("/v1/responses", json={"model": app.model, "input": items})
        assert r.status_code == 200, r.text
        assert r.headers[HEADER] == ", ".join(
            [
                "input.function_call.async",
                "input.function_call.caller",
                "input.function_call.namespace",
                "input.function_call_output.name",
                "input.function_call_output.namespace",
            ]
        )


# Per API: a value for every ignored field (accepted, listed in the header) ...
CHAT_IGNORED: dict[str, Any] = {
    "metadata": {"k": "v"},
    "prediction": {"type": "content", "content": "x"},
    "prompt_cache_key": "k",
    "prompt_cache_options": {"mode": "implicit"},
    "prompt_cache_retention": "24h",
    "safety_identifier": "u",
    "service_tier": "flex",
    "store": True,
    "user": "u",
    "verbosity": "low",
}
RESPONSES_IGNORED: dict[str, Any] = {
    "access_programs": {"cyber": {}},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "image": {"context_compression": "auto"},
    "max_tool_calls": 2,
    "prompt_cache_key": "k",
    "prompt_cache_options": {"mode": "implicit"},
    "prompt_cache_retention": "in_memory",
    "safety_identifier": "u",
    "service_tier": "auto",
    "stream_options": {"include_obfuscation": False},
    "truncation": "auto",
    "user": "u",
}
MESSAGES_IGNORED: dict[str, Any] = {
    "billing_policy": {"type": "standard"},
    "cache_control": {"type": "ephemeral"},
    "compaction": {"type": "auto"},
    "diagnostics": {"previous_message_id": "m"},
    "fallback_credit_token": "t",
    "fallbacks": [{"model": "other"}],
    "inference_geo": "us",
    "metadata": {"user_id": "u"},
    "service_tier": "auto",
    "speed": "fast",
    "user_profile_id": "p",
    "workspace_id": "w",
}
# ... and for every refused one (a 400 naming it).
CHAT_REFUSED: dict[str, Any] = {
    "audio": {"voice": "alloy", "format": "wav"},
    "function_call": "auto",
    "functions": [{"name": "f", "parameters": {}}],
    "moderation": {"model": "m"},
    "web_search_options": {},
}
RESPONSES_REFUSED: dict[str, Any] = {
    "background": True,
    "background_options": {"completion_window": "24h"},
    "conversation": "conv_1",
    "moderation": {"model": "m"},
    "prompt": {"id": "pmpt_1"},
    "top_logprobs": 2,
}
MESSAGES_REFUSED: dict[str, Any] = {
    "container": "c",
    "mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}],
    "thread": {"id": "t"},
}


def _of(table: dict[str, Any], decision: str) -> set[str]:
    return {k for k, v in table.items() if v.decision == decision}


def test_the_samples_cover_every_ignored_and_refused_field() -> None:
    pairs = [
        ("chat.completions", CHAT_IGNORED, CHAT_REFUSED),
        ("responses", RESPONSES_IGNORED, RESPONSES_REFUSED),
        ("messages", MESSAGES_IGNORED, MESSAGES_REFUSED),
    ]
    for api, ignored, refused in pairs:
        table = dict(APIS[api])
        assert set(ignored) == _of(table, "ignored"), api
        assert set(refused) == _of(table, "refused"), api
    assert _of(dict(APIS["completions"]), "refused") == {"best_of", "suffix"}


async def test_ignored_fields_are_accepted_and_listed(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        chat = {"model": app.model, "messages": MSG, **CHAT_IGNORED}
        r = await app.client.post("/v1/chat/completions", json=chat)
        assert r.status_code == 200, r.text
        assert r.headers[HEADER] == ", ".join(sorted(CHAT_IGNORED))
        resp = {"model": app.model, "input": Q, **RESPONSES_IGNORED}
        r = await app.client.post("/v1/responses", json=resp)
        assert r.status_code == 200, r.text
        assert r.headers[HEADER] == ", ".join(sorted(RESPONSES_IGNORED))
        msg = {"model": app.model, "max_tokens": 64, "messages": MSG, **MESSAGES_IGNORED}
        r = await app.client.post("/v1/messages", json=msg)
        assert r.status_code == 200, r.text
        assert r.headers[HEADER] == ", ".join(sorted(MESSAGES_IGNORED))
        # Nothing ignored, no header.
        r = await app.client.post(
            "/v1/chat/completions", json={"model": app.model, "messages": MSG}
        )
        assert HEADER not in r.headers


@pytest.mark.parametrize(
    ("route", "base", "refused"),
    [
        ("/v1/chat/completions", {"messages": MSG}, CHAT_REFUSED),
        ("/v1/responses", {"input": Q}, RESPONSES_REFUSED),
        ("/v1/messages", {"max_tokens": 64, "messages": MSG}, MESSAGES_REFUSED),
    ],
)
async def test_refused_fields_are_400s_naming_them(
    scripted_app: Callable[..., Any],
    testbed_tokens: Any,
    route: str,
    base: dict[str, Any],
    refused: dict[str, Any],
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        for name, value in refused.items():
            r = await app.client.post(route, json={"model": app.model, **base, name: value})
            assert r.status_code == 400, (name, r.text)
            err = r.json()["error"]
            assert name in (err.get("param") or "") + err["message"], (name, err)
        assert app.engine.calls == []


# --- the 2026 knobs


@pytest.mark.parametrize(("effort", "samples"), [("xhigh", 12), ("max", 16)])
async def test_the_2026_efforts_are_auto_plans(
    scripted_app: Callable[..., Any], testbed_tokens: Any, effort: str, samples: int
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        client = app.openai()
        chat = await client.chat.completions.with_raw_response.create(
            model=app.model, messages=MSG, reasoning_effort=effort
        )
        resp = await client.responses.with_raw_response.create(
            model=app.model, input=Q, reasoning={"effort": effort}
        )
        claude = await app.anthropic().messages.with_raw_response.create(
            model=app.model,
            max_tokens=400,
            messages=MSG,
            thinking={"type": "adaptive"},
            output_config={"effort": effort},
        )
    share = {"xhigh": 0.75, "max": 0.875}[effort]
    thinking = int(share * 512)
    want = f"thinking={thinking};tokens={samples * (thinking + 18)}"
    assert chat.headers["X-Budget-Applied"] == want
    assert resp.headers["X-Budget-Applied"] == want
    assert chat.parse().model_extra["thinkgate"]["strategy"] == "auto"
    # Anthropic's max_tokens holds thinking and answer: the thinking fits under it.
    assert claude.headers["X-Budget-Applied"].startswith("thinking=383;")  # 400 - 1 - 16
    got = await claude.parse()
    assert got.model_extra["thinkgate"]["strategy"] == "auto"  # type: ignore[index]
    assert got.content[-1].text.endswith("\\boxed{7}")  # type: ignore[union-attr]


async def test_chat_verbosity_is_accepted_as_responses_text_verbosity(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        client = app.openai()
        r = await client.chat.completions.with_raw_response.create(
            model=app.model, messages=MSG, verbosity="low"
        )
        assert r.headers[HEADER] == "verbosity" and r.parse().choices[0].message.content
        got = await client.responses.create(model=app.model, input=Q, text={"verbosity": "low"})
        assert got.output_text == "\\boxed{7}"


async def test_anthropic_output_format_is_structured_output(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    async with scripted_app(_handler(testbed_tokens, JSON_ANSWER)) as app:
        m = await app.anthropic().messages.create(
            model=app.model,
            max_tokens=64,
            messages=MSG,
            output_config={"format": {"type": "json_schema", "schema": schema}},
        )
        (call,) = app.engine.calls
    structured = call.sampling.structured
    assert structured is not None and json.loads(structured.schema) == schema
    assert json.loads(m.content[-1].text) == {"answer": 7}


async def test_display_omitted_bills_thinking_it_does_not_show(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    thinking = {"type": "enabled", "budget_tokens": 32, "display": "omitted"}
    async with scripted_app(_handler(testbed_tokens)) as app:
        claude = app.anthropic()
        m = await claude.messages.create(
            model=app.model, max_tokens=64, messages=MSG, thinking=thinking
        )
        async with claude.messages.stream(
            model=app.model, max_tokens=64, messages=MSG, thinking=thinking
        ) as stream:
            events = [e async for e in stream]
            streamed = await stream.get_final_message()
        seal = app.asgi.state.gateway.seal
    block = m.content[0]
    assert block.type == "thinking" and block.thinking == ""
    assert m.usage.output_tokens_details.thinking_tokens == 6  # type: ignore[union-attr]
    # The signature carries the thinking: given back, the model sees it.
    assert seal.open(block.signature, "messages.thinking", param="s") == THOUGHT
    assert not [e for e in events if getattr(e, "type", "") == "thinking"]
    assert streamed.content[0].thinking == "" and streamed.content[0].signature


async def test_thinking_signatures_round_trip_and_refuse_tampering(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), reasoning_key="one") as app:
        claude = app.anthropic()
        first = await claude.messages.create(model=app.model, max_tokens=64, messages=MSG)
        turn = [block.model_dump(exclude_none=True) for block in first.content]
        for block in turn:
            block.pop("thinkgate", None)
        follow = [*MSG, {"role": "assistant", "content": turn}, {"role": "user", "content": Q}]
        await claude.messages.create(model=app.model, max_tokens=64, messages=follow)
        prompt = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        assert THOUGHT.strip() in prompt  # turn 1's thinking, read back from its signature
        # Display omitted: the block comes back without text, the signature restores it.
        omitted = [{**turn[0], "thinking": ""}, turn[1]]
        back = [*MSG, {"role": "assistant", "content": omitted}, {"role": "user", "content": Q}]
        await claude.messages.create(model=app.model, max_tokens=64, messages=back)
        assert THOUGHT.strip() in testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        tampered = [{**turn[0], "thinking": "3+4=8\n"}, turn[1]]
        bad = [*MSG, {"role": "assistant", "content": tampered}, {"role": "user", "content": Q}]
        with pytest.raises(anthropic.BadRequestError) as info:
            await claude.messages.create(model=app.model, max_tokens=64, messages=bad)
        assert "signature" in info.value.message or "thinking" in info.value.message
    # Another server's key: the signature does not open there.
    async with scripted_app(_handler(testbed_tokens), reasoning_key="two") as other:
        with pytest.raises(anthropic.BadRequestError) as info:
            await other.anthropic().messages.create(
                model=other.model, max_tokens=64, messages=follow
            )
        assert "another key" in info.value.message


async def test_encrypted_reasoning_carries_turn_ones_thinking_without_a_store(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    include = ["reasoning.encrypted_content"]
    async with scripted_app(_handler(testbed_tokens), reasoning_key="one") as app:
        client = app.openai()
        first = await client.responses.create(
            model=app.model, input=Q, store=False, include=include
        )
        reasoning = next(i for i in first.output if i.type == "reasoning")
        assert reasoning.encrypted_content
        # Given back as a harness does: the item with its blob, no readable content.
        item = {
            "type": "reasoning",
            "id": reasoning.id,
            "summary": [],
            "encrypted_content": reasoning.encrypted_content,
        }
        answer = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": first.output_text}],
        }
        turn2 = [{"role": "user", "content": Q}, item, answer, {"role": "user", "content": Q}]
        await client.responses.create(model=app.model, input=turn2, store=False, include=include)
        prompt = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        assert THOUGHT.strip() in prompt  # the reasoning the model sees is turn 1's
        # Streamed, the done item carries its blob too.
        async with await client.responses.create(
            model=app.model, input=Q, include=include, stream=True
        ) as stream:
            done = [e async for e in stream if e.type == "response.output_item.done"]
        assert done[0].item.type == "reasoning" and done[0].item.encrypted_content
        blob = reasoning.encrypted_content
        flipped = blob[:-4] + ("AAAA" if blob[-4:] != "AAAA" else "BBBB")
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(
                model=app.model,
                input=[{**turn2[0]}, {**item, "encrypted_content": flipped}, answer, turn2[3]],
            )
        assert info.value.body["param"] == "input.1.encrypted_content"  # type: ignore[index]
    async with scripted_app(_handler(testbed_tokens), reasoning_key="two") as other:
        with pytest.raises(openai.BadRequestError):
            await other.openai().responses.create(model=other.model, input=turn2)


async def test_system_turns_and_clearing_thinking_shape_the_prompt(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    def turn(thought: str) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": thought}, {"type": "text", "text": "7"}],
        }

    conversation = [
        *MSG,
        turn("1+1=2\n"),
        {"role": "system", "content": "9-9=0"},
        {"role": "user", "content": Q},
        turn("5+5=0\n"),
        {"role": "user", "content": Q},
    ]
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "max_tokens": 64, "messages": conversation}
        r = await app.client.post("/v1/messages", json=body)
        assert r.status_code == 200, r.text
        whole = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        assert "9-9=0" in whole and "1+1=2" in whole and "5+5=0" in whole
        edit = {"edits": [{"type": "clear_thinking_20251015"}]}  # keeps the last turn's
        r = await app.client.post("/v1/messages", json={**body, "context_management": edit})
        assert r.status_code == 200, r.text
        cleared = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        assert "1+1=2" not in cleared and "5+5=0" in cleared
        other = {"edits": [{"type": "clear_tool_uses_20250919"}]}
        r = await app.client.post("/v1/messages", json={**body, "context_management": other})
        assert r.status_code == 400 and "clear_thinking_20251015" in r.text


async def test_namespace_tools_are_functions_and_hosted_tools_are_left_out(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    params = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fn = {"type": "function", "name": "add", "parameters": params, "defer_loading": True}
    tools = [{"type": "namespace", "name": "math", "tools": [fn]}, {"type": "web_search"}]
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {
            "model": app.model,
            "input": Q,
            "tools": tools,
            "tool_choice": {"type": "function", "name": "add"},
        }
        r = await app.client.post("/v1/responses", json=body)
        assert r.status_code == 200, r.text
        assert r.headers[HEADER] == "tools.web_search"
        (call,) = app.engine.calls
    # The namespace's function is the one the grammar holds the call to.
    structured = call.sampling.structured
    assert structured is not None and json.loads(structured.schema) == params


async def test_token_counts_and_model_routes_answer_both_sdks(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        counted = await app.anthropic().messages.count_tokens(model=app.model, messages=MSG)
        await app.anthropic().messages.create(model=app.model, max_tokens=64, messages=MSG)
        assert counted.input_tokens == len(app.engine.calls[-1].prompt_token_ids)
        openai_count = await app.openai().responses.input_tokens.count(model=app.model, input=Q)
        await app.openai().responses.create(model=app.model, input=Q)
        assert openai_count.input_tokens == len(app.engine.calls[-1].prompt_token_ids)
        # A prompt past the context is counted all the same.
        long = [{"role": "user", "content": "1+" * 600 + "1"}]
        big = await app.anthropic().messages.count_tokens(model=app.model, messages=long)
        assert big.input_tokens > 512
        model = await app.openai().models.retrieve(app.model)
        assert model.id == app.model and model.object == "model"
        info = await app.anthropic().models.retrieve(app.model)
        assert info.id == app.model and info.type == "model" and info.display_name
        page = await app.anthropic().models.list()
        assert page.data[0].id == app.model  # then the presets
        with pytest.raises(openai.NotFoundError):
            await app.openai().models.retrieve("other-model")
        with pytest.raises(anthropic.BadRequestError):
            await app.anthropic().messages.count_tokens(
                model=app.model,
                messages=[{"role": "user", "content": [{"type": "image"}]}],  # type: ignore[list-item]
            )


async def test_odd_include_values_and_tool_types_are_400s_not_bad_headers(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    # Found by the fuzz: a value echoed into X-Thinkgate-Ignored must be a known name.
    async with scripted_app(_handler(testbed_tokens)) as app:
        for extra, param in (
            ({"include": ["\u00c6\U000f13a2u"]}, "include"),
            ({"include": ["file_search_call.results", "x"]}, "include"),
            ({"tools": [{"type": "w\u00e9b search"}]}, "tools.0.type"),
        ):
            body = json.dumps({"model": app.model, "input": Q, **extra})
            r = await app.client.post(
                "/v1/responses", content=body, headers={"content-type": "application/json"}
            )
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
        ok = {"model": app.model, "input": Q, "include": ["file_search_call.results"]}
        r = await app.client.post("/v1/responses", json=ok)
        assert r.status_code == 200 and r.headers[HEADER] == "include.file_search_call.results"


async def test_messages_max_tokens_past_the_context_runs_to_its_end(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    # Harnesses send max_tokens 32,000 whatever the prompt: Anthropic's rule, the answer
    # runs to the context's end (OpenAI's routes keep their 400).
    def cut(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(testbed_tokens, THOUGHT, finish_reason="length")

    async with scripted_app(cut) as app:
        claude = app.anthropic()
        # (The SDK refuses a non-streamed call this long unless a timeout is set.)
        m = await claude.messages.create(
            model=app.model, max_tokens=32000, messages=MSG, timeout=60
        )
        (call,) = app.engine.calls
        assert call.sampling.max_tokens == 512 - len(call.prompt_token_ids)
        assert m.stop_reason == "model_context_window_exceeded"
        async with claude.messages.stream(
            model=app.model, max_tokens=32000, messages=MSG
        ) as stream:
            streamed = await stream.get_final_message()
        assert streamed.stop_reason == "model_context_window_exceeded"
        # Under the room, a cut is the client's max_tokens.
        small = await claude.messages.create(model=app.model, max_tokens=64, messages=MSG)
        assert small.stop_reason == "max_tokens"
        with pytest.raises(openai.BadRequestError) as info:
            await app.openai().chat.completions.create(
                model=app.model, messages=MSG, max_tokens=32000
            )
        assert info.value.body["param"] == "max_tokens"  # type: ignore[index]
