"""A tool-call round trip with the tool-calling testbed model (testbed/models/tools),
through the OpenAI SDK against ``thinkgate serve``: offered the calculator, the model
calls it for a long question (``tool_calls``, streamed too), answers from the tool's
result, and works short questions out itself; self-consistency votes on the calls;
Elastic Reasoning's budgets end thinking before the call and report a cut call. The
same round trip on the Responses API and on the Anthropic Messages API (its SDK)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from testbed.task import make_questions
from testbed.tools import CALCULATOR, calculate

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LONG = make_questions("test", 1, seed=5, min_ops=11, max_ops=12)[0]
SHORT = make_questions("test", 1, seed=5, min_ops=2, max_ops=2)[0]


@pytest.fixture(scope="module")
def server(tools_server: Any) -> Any:
    return tools_server


@pytest.fixture(scope="module")
def client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def _ask(question: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": question.prompt}]


def test_a_call_the_tools_result_then_the_answer(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model="testbed-tools", messages=_ask(LONG), tools=[CALCULATOR], temperature=0
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "calculator"
    args = json.loads(call.function.arguments)
    assert args == {"expression": LONG.expr, "modulo": 10}
    result = calculate(**args)
    turns = [
        *_ask(LONG),
        choice.message.model_dump(exclude_none=True),  # given back as the SDK holds it
        {"role": "tool", "tool_call_id": call.id, "content": str(result)},
    ]
    second = client.chat.completions.create(
        model="testbed-tools", messages=turns, tools=[CALCULATOR], temperature=0
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content.strip() == f"\\boxed{{{result}}}"
    assert result == LONG.answer


def test_short_questions_and_no_tools_are_worked_out(client: openai.OpenAI) -> None:
    for question, tools in ((SHORT, [CALCULATOR]), (LONG, None)):
        extra = {"tools": tools} if tools else {}
        r = client.chat.completions.create(
            model="testbed-tools", messages=_ask(question), temperature=0, **extra
        )
        assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
        assert "=" in r.choices[0].message.reasoning_content  # step by step


def test_a_named_function_holds_the_answer_to_its_arguments(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="testbed-tools",
        messages=_ask(LONG),
        tools=[CALCULATOR],
        tool_choice={"type": "function", "function": {"name": "calculator"}},
        max_tokens=300,
        temperature=0,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop", choice
    (call,) = choice.message.tool_calls
    args = json.loads(call.function.arguments)
    assert call.function.name == "calculator"
    assert isinstance(args["expression"], str) and isinstance(args["modulo"], int)


def test_required_with_parallel_calls_off_is_one_call(client: openai.OpenAI) -> None:
    """``parallel_tool_calls: false`` holds ``required``'s array to one item in vLLM's own
    grammar (``maxItems``)."""
    r = client.chat.completions.create(
        model="testbed-tools",
        messages=_ask(LONG),
        tools=[CALCULATOR],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=300,
        temperature=0,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.function.name == "calculator"
    assert isinstance(json.loads(call.function.arguments)["expression"], str)


def test_streamed_call(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="testbed-tools", messages=_ask(LONG), tools=[CALCULATOR], stream=True, temperature=0
    )
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    finish = None
    for chunk in stream:  # joined by index, as a client joins OpenAI's pieces
        for c in chunk.choices:
            for piece in c.delta.tool_calls or []:
                if piece.function and piece.function.name:
                    names[piece.index] = piece.function.name
                if piece.function and piece.function.arguments:
                    arguments[piece.index] = (
                        arguments.get(piece.index, "") + piece.function.arguments
                    )
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert names == {0: "calculator"}
    assert json.loads(arguments[0])["expression"] == LONG.expr


def test_self_consistency_votes_on_calls_and_elastic_closes_thinking_before_one(
    client: openai.OpenAI,
) -> None:
    r = client.chat.completions.create(
        model="testbed-tools",
        messages=_ask(LONG),
        tools=[CALCULATOR],
        extra_body={"strategy": "self-consistency", "budget": {"samples": 4}},
    )
    winner = next(c for c in r.model_extra["thinkgate"]["classes"] if c["selected"])
    assert winner["answer"].startswith("tool_calls:")
    assert r.choices[0].finish_reason == "tool_calls"
    r = client.chat.completions.create(  # DeepConf's confidence-weighted vote, the same way
        model="testbed-tools",
        messages=_ask(LONG),
        tools=[CALCULATOR],
        extra_body={"strategy": "deepconf", "budget": {"samples": 4}},
    )
    assert r.choices[0].finish_reason == "tool_calls", r.model_extra["thinkgate"]
    # A thinking budget as long as the model's one line ("calculator\n"): elastic's
    # </think> comes where thinking ends, before the call, which is then written whole.
    r = client.chat.completions.create(
        model="testbed-tools",
        messages=_ask(LONG),
        tools=[CALCULATOR],
        temperature=0,
        extra_body={"strategy": "elastic", "budget": {"thinking": 11, "solution": 160}},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert json.loads(choice.message.tool_calls[0].function.arguments)["expression"] == LONG.expr
    # A solution budget that cuts the call: no call, the cut text, reported as cut.
    r = client.chat.completions.create(
        model="testbed-tools",
        messages=_ask(LONG),
        tools=[CALCULATOR],
        temperature=0,
        extra_body={"strategy": "elastic", "budget": {"solution": 40}},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "length" and not choice.message.tool_calls
    assert choice.message.content.startswith("<tool_call>")
    assert r.model_extra["thinkgate"]["choices"][0]["solution_cut"] is True


def test_the_round_trip_on_the_responses_api(client: openai.OpenAI) -> None:
    tool = {"type": "function", **CALCULATOR["function"]}
    first = client.responses.create(
        model="testbed-tools", input=LONG.prompt, tools=[tool], temperature=0
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    args = json.loads(call.arguments)
    assert args == {"expression": LONG.expr, "modulo": 10}
    given_back = [
        {"role": "user", "content": LONG.prompt},
        *(item.model_dump(exclude_none=True) for item in first.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": str(calculate(**args))},
    ]
    second = client.responses.create(
        model="testbed-tools", input=given_back, tools=[tool], temperature=0
    )
    assert second.output_text.strip() == f"\\boxed{{{LONG.answer}}}"


def test_the_round_trip_on_the_messages_api(server: Any) -> None:
    claude = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0)
    fn = CALCULATOR["function"]
    tool = {"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}
    turns: list[Any] = [{"role": "user", "content": LONG.prompt}]
    with claude.messages.stream(  # streamed: the SDK assembles the call's input
        model="testbed-tools",
        max_tokens=200,
        messages=turns,
        tools=[tool],
        extra_body={"temperature": 0},  # this SDK's stream() takes no temperature
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use", first
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.input == {"expression": LONG.expr, "modulo": 10}
    result = calculate(**use.input)  # type: ignore[arg-type]
    turns += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": str(result)}],
        },
    ]
    second = claude.messages.create(
        model="testbed-tools",
        max_tokens=200,
        messages=turns,
        tools=[tool],
        extra_body={"temperature": 0},
    )
    assert second.stop_reason == "end_turn"
    assert second.content[-1].type == "text"
    assert second.content[-1].text.strip() == f"\\boxed{{{result}}}"
