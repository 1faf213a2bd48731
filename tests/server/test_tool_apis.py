"""Chat's streamed calls in OpenAI's pieces, and tools on the Responses API and the
Anthropic Messages API, through the real SDKs
against the app of ``thinkgate serve`` over ASGI, with a scripted engine that answers
with a call (the tools model's template renders what it is offered): ``function_call``
items and ``tool_use`` blocks out, non-streamed and streamed; calls and tool results
given back reach the model's prompt; ``tool_choice`` forms become the engine's grammar;
the bad ones are 400s naming the field. The tools model's real calls are checked live
(``test_tool_calls_live.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import testbed
from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from testbed.tools import CALCULATOR, TOOL_NAME

QUESTION = "Compute 3+8-5+7-1+2-6+4-9+1 mod 10."
ARGS = {"expression": "3+8-5+7-1+2-6+4-9+1", "modulo": 10}
CALL = (
    "<think>\n</think>\n"
    f'<tool_call>{{"name": "{TOOL_NAME}", "arguments": {json.dumps(ARGS)}}}</tool_call>'
)
RESULT = "4"
# The Responses API's flat function tool, Anthropic's client tool: the same calculator.
FN = CALCULATOR["function"]
RESPONSES_TOOL = {"type": "function", **FN}
ANTHROPIC_TOOL = {
    "name": FN["name"],
    "description": FN["description"],
    "input_schema": FN["parameters"],
}


@pytest.fixture(scope="module")
def tools_tokens() -> Any:
    from engines.tokens import TokenizerTokens

    return TokenizerTokens.load(str(Path(testbed.model_path("tools"))))


def _answers(tokens: Any, *texts: str) -> Callable[[GenerateRequest], list[Sample]]:
    """A handler answering its n-th call with ``texts[n]`` (the last one after that)."""
    seen: list[GenerateRequest] = []

    def handle(request: GenerateRequest) -> list[Sample]:
        seen.append(request)
        return samples_of(tokens, texts[min(len(seen), len(texts)) - 1])

    return handle


def _prompt(tokens: Any, request: GenerateRequest) -> str:
    return str(tokens.decode(list(request.prompt_token_ids)))


# -- chat ------------------------------------------------------------------------------


async def test_chat_streams_a_call_in_openais_pieces(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    messages: Any = [{"role": "user", "content": QUESTION}]
    async with scripted_app(_answers(tools_tokens, CALL), tokens=tools_tokens) as app:
        client = app.openai()
        stream = await client.chat.completions.create(
            model=app.model, messages=messages, tools=[CALCULATOR], stream=True
        )
        pieces = [
            p async for chunk in stream for c in chunk.choices for p in c.delta.tool_calls or []
        ]
        # The SDK's own accumulation of the same stream.
        async with client.chat.completions.stream(
            model=app.model, messages=messages, tools=[CALCULATOR]
        ) as helper:
            final = await helper.get_final_completion()
    head, args = pieces
    assert head.index == args.index == 0 and head.id and head.id.startswith("call_")
    assert head.function.name == TOOL_NAME and head.function.arguments == ""  # type: ignore[union-attr]
    assert args.id is None and json.loads(args.function.arguments) == ARGS  # type: ignore[union-attr]
    (call,) = final.choices[0].message.tool_calls or []
    assert call.function.name == TOOL_NAME and json.loads(call.function.arguments) == ARGS
    assert final.choices[0].finish_reason == "tool_calls"


# -- the Responses API ------------------------------------------------------------------


async def test_responses_a_function_call_item_then_the_answer_from_its_output(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    handler = _answers(tools_tokens, CALL, "<think>\n</think>\n\\boxed{4}")
    async with scripted_app(handler, tokens=tools_tokens) as app:
        client = app.openai()
        first = await client.responses.create(
            model=app.model, input=QUESTION, tools=[RESPONSES_TOOL]
        )
        calls = [item for item in first.output if item.type == "function_call"]
        assert [item.type for item in first.output] == ["reasoning", "function_call"]
        (call,) = calls
        assert call.name == TOOL_NAME and json.loads(call.arguments) == ARGS
        assert call.call_id.startswith("call_") and call.status == "completed"
        assert first.status == "completed" and first.tool_choice == "auto"
        assert [t.name for t in first.tools] == [TOOL_NAME]  # type: ignore[union-attr]
        given_back = [
            {"role": "user", "content": QUESTION},
            *(item.model_dump(exclude_none=True) for item in first.output),
            {"type": "function_call_output", "call_id": call.call_id, "output": RESULT},
        ]
        second = await client.responses.create(
            model=app.model, input=given_back, tools=[RESPONSES_TOOL]
        )
        first_call, second_call = app.engine.calls
    assert second.output_text.strip() == "\\boxed{4}"
    assert "tools: calculator" in _prompt(tools_tokens, first_call)
    prompt = _prompt(tools_tokens, second_call)
    # The call as the model wrote it, then the tool's turn with its result.
    assert '<tool_call>{"name": "calculator", "arguments": ' in prompt
    assert prompt.index("<tool_call>") < prompt.index(f"tool\n{RESULT}")


async def test_responses_streamed_call_arrives_as_the_sdk_accumulates_it(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    async with (
        scripted_app(_answers(tools_tokens, CALL), tokens=tools_tokens) as app,
        app.openai().responses.stream(
            model=app.model, input=QUESTION, tools=[RESPONSES_TOOL]
        ) as stream,
    ):
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    assert "response.output_text.delta" not in kinds  # the answer is only a call
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert json.loads(call.arguments) == ARGS and call.call_id.startswith("call_")


async def test_responses_named_tool_choice_is_the_engines_grammar(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    answer = f"<think>\n</think>\n{json.dumps(ARGS)}"
    async with scripted_app(_answers(tools_tokens, answer), tokens=tools_tokens) as app:
        r = await app.openai().responses.create(
            model=app.model,
            input=QUESTION,
            tools=[RESPONSES_TOOL],
            tool_choice={"type": "function", "name": TOOL_NAME},
        )
        (engine_call,) = app.engine.calls
    structured = engine_call.sampling.structured
    assert structured is not None and json.loads(structured.schema) == FN["parameters"]
    (call,) = [item for item in r.output if item.type == "function_call"]
    assert json.loads(call.arguments) == ARGS
    assert r.tool_choice.name == TOOL_NAME  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"tools": [{**RESPONSES_TOOL, "name": "a b"}]}, "tools.0.name"),
        (
            {"tools": [RESPONSES_TOOL], "tool_choice": {"type": "function", "name": "x"}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        (
            {"input": [{"type": "function_call_output", "output": "4"}]},
            "input.0.call_id",
        ),
    ],
)
async def test_responses_bad_tools_are_400s_naming_the_field(
    scripted_app: Callable[..., Any], extra: dict[str, Any], param: str
) -> None:
    async with scripted_app(_answers(None, "")) as app:
        with pytest.raises(openai.BadRequestError) as info:
            await app.openai().responses.create(**{"model": app.model, "input": QUESTION, **extra})
        assert app.engine.calls == []
    assert info.value.body["param"] == param  # type: ignore[index]


# -- the Anthropic Messages API ---------------------------------------------------------


async def test_messages_a_tool_use_block_then_the_answer_from_its_result(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    handler = _answers(tools_tokens, CALL, "<think>\n</think>\n\\boxed{4}")
    async with scripted_app(handler, tokens=tools_tokens) as app:
        claude = app.anthropic()
        turns: list[Any] = [{"role": "user", "content": QUESTION}]
        first = await claude.messages.create(
            model=app.model, max_tokens=256, messages=turns, tools=[ANTHROPIC_TOOL]
        )
        assert first.stop_reason == "tool_use"
        assert [b.type for b in first.content] == ["thinking", "tool_use"]
        use = first.content[1]
        assert use.type == "tool_use" and use.name == TOOL_NAME and use.input == ARGS
        assert use.id.startswith("toolu_")
        turns += [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": RESULT}],
            },
        ]
        second = await claude.messages.create(
            model=app.model, max_tokens=256, messages=turns, tools=[ANTHROPIC_TOOL]
        )
        _, second_call = app.engine.calls
    assert second.stop_reason == "end_turn"
    assert second.content[-1].type == "text" and second.content[-1].text.strip() == "\\boxed{4}"
    prompt = _prompt(tools_tokens, second_call)
    assert prompt.index('"expression": "3+8-5+7-1+2-6+4-9+1"') < prompt.index(f"tool\n{RESULT}")


async def test_messages_streamed_tool_use_arrives_as_the_sdk_accumulates_it(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    async with (
        scripted_app(_answers(tools_tokens, CALL), tokens=tools_tokens) as app,
        app.anthropic().messages.stream(
            model=app.model,
            max_tokens=256,
            messages=[{"role": "user", "content": QUESTION}],
            tools=[ANTHROPIC_TOOL],
        ) as stream,
    ):
        kinds = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert "input_json" in kinds  # the SDK's event for an input_json_delta
    assert final.stop_reason == "tool_use"
    (use,) = [b for b in final.content if b.type == "tool_use"]
    assert use.input == ARGS and use.name == TOOL_NAME


async def test_messages_any_tool_choice_is_the_engines_grammar(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    answer = f'<think>\n</think>\n[{{"name": "{TOOL_NAME}", "parameters": {json.dumps(ARGS)}}}]'
    async with scripted_app(_answers(tools_tokens, answer), tokens=tools_tokens) as app:
        r = await app.anthropic().messages.create(
            model=app.model,
            max_tokens=256,
            messages=[{"role": "user", "content": QUESTION}],
            tools=[ANTHROPIC_TOOL],
            tool_choice={"type": "any"},
        )
        (engine_call,) = app.engine.calls
    structured = engine_call.sampling.structured
    assert structured is not None and json.loads(structured.schema)["type"] == "array"
    (use,) = [b for b in r.content if b.type == "tool_use"]
    assert use.input == ARGS and r.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            {
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                "tool_choice": {"type": "tool", "name": "web_search"},
            },
            "server tool",
        ),
        ({"tools": [{"type": "web search", "name": "w"}]}, "tools.0"),
        ({"tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "tool"}}, "tool_choice"),
        ({"tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "tool", "name": "x"}}, "tool_choice"),
        (
            {
                "messages": [
                    {"role": "user", "content": QUESTION},
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
                    {"role": "user", "content": "go on"},
                ]
            },
            "tool_result",
        ),
    ],
)
async def test_messages_bad_tools_are_400s_in_anthropics_envelope(
    scripted_app: Callable[..., Any], extra: dict[str, Any], words: str
) -> None:
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": QUESTION}]}
    async with scripted_app(_answers(None, "")) as app:
        with pytest.raises(anthropic.BadRequestError) as info:
            await app.anthropic().messages.create(**{**body, "model": app.model, **extra})
        assert app.engine.calls == []
    error = info.value.body
    assert isinstance(error, dict) and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]


# -- one call only: chat's parallel_tool_calls, its Responses twin, Anthropic's flag --------

SECOND_ARGS = {"expression": "2+2", "modulo": 10}
TWO_CALLS = CALL + (
    f'<tool_call>{{"name": "{TOOL_NAME}", "arguments": {json.dumps(SECOND_ARGS)}}}</tool_call>'
)


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_parallel_tool_calls_false_keeps_the_first_call(
    scripted_app: Callable[..., Any], tools_tokens: Any, stream: bool
) -> None:
    messages: Any = [{"role": "user", "content": QUESTION}]
    async with scripted_app(_answers(tools_tokens, TWO_CALLS), tokens=tools_tokens) as app:
        client = app.openai()

        async def calls(**kw: Any) -> list[Any]:
            if not stream:
                r = await client.chat.completions.create(
                    model=app.model, messages=messages, tools=[CALCULATOR], **kw
                )
                return list(r.choices[0].message.tool_calls or [])
            async with client.chat.completions.stream(
                model=app.model, messages=messages, tools=[CALCULATOR], **kw
            ) as helper:
                final = await helper.get_final_completion()
            return list(final.choices[0].message.tool_calls or [])

        both = await calls()
        (one,) = await calls(parallel_tool_calls=False)
    assert [json.loads(c.function.arguments) for c in both] == [ARGS, SECOND_ARGS]
    assert json.loads(one.function.arguments) == ARGS


async def test_chat_required_with_one_call_is_held_to_one_by_the_grammar(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    answer = f'<think>\n</think>\n[{{"name": "{TOOL_NAME}", "parameters": {json.dumps(ARGS)}}}]'
    messages: Any = [{"role": "user", "content": QUESTION}]
    async with scripted_app(_answers(tools_tokens, answer), tokens=tools_tokens) as app:
        for parallel in (False, None):
            extra = {} if parallel is None else {"parallel_tool_calls": parallel}
            await app.openai().chat.completions.create(
                model=app.model,
                messages=messages,
                tools=[CALCULATOR],
                tool_choice="required",
                **extra,
            )
        single, free = app.engine.calls
    assert json.loads(single.sampling.structured.schema)["maxItems"] == 1
    assert "maxItems" not in json.loads(free.sampling.structured.schema)


async def test_responses_parallel_tool_calls_is_honoured_and_repeated(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    async with scripted_app(_answers(tools_tokens, TWO_CALLS), tokens=tools_tokens) as app:
        client = app.openai()
        both = await client.responses.create(
            model=app.model, input=QUESTION, tools=[RESPONSES_TOOL]
        )
        one = await client.responses.create(
            model=app.model, input=QUESTION, tools=[RESPONSES_TOOL], parallel_tool_calls=False
        )
    assert [i.type for i in both.output].count("function_call") == 2
    assert both.parallel_tool_calls is True
    (call,) = [i for i in one.output if i.type == "function_call"]
    assert json.loads(call.arguments) == ARGS and one.parallel_tool_calls is False


async def test_messages_disable_parallel_tool_use_keeps_one_tool_use_block(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    async with scripted_app(_answers(tools_tokens, TWO_CALLS), tokens=tools_tokens) as app:
        claude = app.anthropic()
        turns: Any = [{"role": "user", "content": QUESTION}]
        both = await claude.messages.create(
            model=app.model, max_tokens=256, messages=turns, tools=[ANTHROPIC_TOOL]
        )
        one = await claude.messages.create(
            model=app.model,
            max_tokens=256,
            messages=turns,
            tools=[ANTHROPIC_TOOL],
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        )
    assert [b.input for b in both.content if b.type == "tool_use"] == [ARGS, SECOND_ARGS]
    assert [b.input for b in one.content if b.type == "tool_use"] == [ARGS]
    assert one.stop_reason == "tool_use"


# -- tools together with a JSON format --------------------------------------------------

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
CALLED = f'<think>\n</think>\n[{{"name": "{TOOL_NAME}", "parameters": {json.dumps(ARGS)}}}]'
FORMATTED = '<think>\n</think>\n{"answer": 4}'


async def test_tools_with_a_json_format_answer_a_call_or_the_format_on_every_api(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    # OpenAI serves both together: the answer is a call, or an answer in the format.
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
    messages: Any = [{"role": "user", "content": QUESTION}]
    handler = _answers(tools_tokens, CALLED, FORMATTED, CALLED, FORMATTED, CALLED)
    async with scripted_app(handler, tokens=tools_tokens) as app:
        client = app.openai()
        called = await client.chat.completions.create(
            model=app.model, messages=messages, tools=[CALCULATOR], response_format=fmt
        )
        answered = await client.chat.completions.create(
            model=app.model, messages=messages, tools=[CALCULATOR], response_format=fmt
        )
        text = {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}}
        r_called = await client.responses.create(
            model=app.model, input=QUESTION, tools=[RESPONSES_TOOL], text=text
        )
        r_answered = await client.responses.create(
            model=app.model, input=QUESTION, tools=[RESPONSES_TOOL], text=text
        )
        m_called = await app.anthropic().messages.create(
            model=app.model,
            max_tokens=128,
            messages=messages,
            tools=[ANTHROPIC_TOOL],
            output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
        )
        grammars = [json.loads(c.sampling.structured.schema) for c in app.engine.calls]
    (call,) = called.choices[0].message.tool_calls or []
    assert called.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.function.arguments) == ARGS
    assert json.loads(answered.choices[0].message.content or "") == {"answer": 4}
    assert answered.choices[0].message.tool_calls is None
    (fc,) = [i for i in r_called.output if i.type == "function_call"]
    assert json.loads(fc.arguments) == ARGS
    assert json.loads(r_answered.output_text) == {"answer": 4}
    assert [b.type for b in m_called.content] == ["thinking", "tool_use"]
    # One grammar: the calls' array or the client's schema.
    for grammar in grammars:
        assert "anyOf" in grammar, (grammars.index(grammar), grammar)
        calls, answer = grammar["anyOf"]
        assert calls["type"] == "array" and answer == SCHEMA
    # A forced call has no answer to format: its grammar is the call's alone.
    async with scripted_app(_answers(tools_tokens, CALLED), tokens=tools_tokens) as app:
        await app.openai().chat.completions.create(
            model=app.model,
            messages=messages,
            tools=[CALCULATOR],
            tool_choice="required",
            response_format={"type": "json_object"},
        )
        (forced,) = app.engine.calls
    assert json.loads(forced.sampling.structured.schema)["type"] == "array"


async def test_messages_server_tools_are_left_out_and_named_in_the_header(
    scripted_app: Callable[..., Any], tools_tokens: Any
) -> None:
    server_tools: Any = [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "bash_20250124", "name": "bash"},
    ]
    messages: Any = [{"role": "user", "content": QUESTION}]
    async with scripted_app(_answers(tools_tokens, CALL), tokens=tools_tokens) as app:
        r = await app.anthropic().messages.with_raw_response.create(
            model=app.model,
            max_tokens=128,
            messages=messages,
            tools=[*server_tools, ANTHROPIC_TOOL],
        )
        (engine_call,) = app.engine.calls
        prompt = _prompt(tools_tokens, engine_call)
    assert r.headers["X-Thinkgate-Ignored"] == "tools.bash_20250124, tools.web_search_20250305"
    assert TOOL_NAME in prompt and "web_search" not in prompt
    (use,) = [b for b in (await r.parse()).content if b.type == "tool_use"]
    assert use.input == ARGS
