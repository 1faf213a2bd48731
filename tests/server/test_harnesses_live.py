"""Agent libraries, unmodified, running a tool round trip against ``thinkgate serve`` on
the tool-calling testbed model: the OpenAI Agents SDK (Responses with ``store: false``
and the reasoning carried sealed, and Chat Completions), LangChain's ``ChatOpenAI``
(chat and Responses) and pydantic-ai. Each offers the calculator, the model calls it for
a long question, the library runs it and sends the result back, the model answers."""

from __future__ import annotations

from typing import Any

import pytest

from testbed.task import make_questions
from testbed.tools import CALCULATOR, calculate

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LONG = make_questions("test", 1, seed=5, min_ops=11, max_ops=12)[0]
BOXED = f"\\boxed{{{LONG.answer}}}"
MODEL = "testbed-tools"


@pytest.fixture(scope="module")
def server(tools_server: Any) -> Any:
    return tools_server


def calculator(expression: str, modulo: int) -> int:
    """The value of a chain of digits joined by + and -, modulo a number."""
    return calculate(expression, modulo)


@pytest.mark.parametrize("api", ["responses", "responses-stored", "chat"])
async def test_the_openai_agents_sdk(server: Any, api: str) -> None:
    import openai
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    model: Any
    if api == "responses":
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
        # What coding agents send: nothing stored, the reasoning carried sealed.
        settings = ModelSettings(
            temperature=0, store=False, response_include=["reasoning.encrypted_content"]
        )
    elif api == "responses-stored":
        # Stored: each turn sends only what is new, and previous_response_id.
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
        settings = ModelSettings(temperature=0, store=True)
    else:
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        settings = ModelSettings(temperature=0)
    calls: list[dict[str, Any]] = []

    @function_tool
    def calc(expression: str, modulo: int) -> int:
        """The value of a chain of digits joined by + and -, modulo a number."""
        calls.append({"expression": expression, "modulo": modulo})
        return calculate(expression, modulo)

    calc.name = "calculator"
    agent = Agent(name="calc", tools=[calc], model=model, model_settings=settings)
    stored = api == "responses-stored"
    result = await Runner.run(agent, LONG.prompt, max_turns=4, auto_previous_response_id=stored)
    assert calls == [{"expression": LONG.expr, "modulo": 10}]
    assert str(result.final_output).strip() == BOXED
    if stored:
        # Turn 2 continued turn 1 from the store: its reasoning is turn 1's own.
        first, second = (r.response_id for r in result.raw_responses)
        assert first and second
        turn1 = await client.responses.retrieve(first)
        turn2 = await client.responses.retrieve(second)
        # What turn 2 was answered from: turn 1's input and output, then the tool's result.
        held = (await client.responses.input_items.list(second, order="asc")).data
        assert [i.type for i in held] == [
            "message",
            *(i.type for i in turn1.output),
            "function_call_output",
        ]
        said = [i.model_dump(exclude_none=True) for i in turn1.output]
        user = {"role": "user", "content": LONG.prompt}
        reply = held[-1].model_dump(exclude_none=True, exclude={"id", "status"})
        whole = [user, *said, reply]
        bare = [user, *[i for i in said if i["type"] != "reasoning"], reply]

        tools = [t.model_dump(exclude_none=True) for t in turn2.tools]

        async def count(items: list[Any]) -> int:
            got = await client.responses.input_tokens.count(model=MODEL, input=items, tools=tools)
            return int(got.input_tokens)

        assert turn2.usage is not None
        assert turn2.usage.input_tokens == await count(whole) > await count(bare)
    await client.close()


@pytest.mark.parametrize("responses", [False, True])
def test_langchain_chat_openai(server: Any, responses: bool) -> None:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=MODEL,
        base_url=f"{server.base_url}/v1",
        api_key="unused",  # type: ignore[arg-type]
        temperature=0,
        use_responses_api=responses,
        max_retries=0,
    ).bind_tools([CALCULATOR])
    question = HumanMessage(LONG.prompt)
    first = llm.invoke([question])
    (call,) = first.tool_calls  # type: ignore[attr-defined]
    assert call["name"] == "calculator"
    result = calculate(**call["args"])
    final = llm.invoke([question, first, ToolMessage(str(result), tool_call_id=call["id"])])
    text = final.content if isinstance(final.content, str) else final.text()
    assert text.strip() == BOXED


def test_pydantic_ai(server: Any) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=f"{server.base_url}/v1", api_key="unused")
    agent = Agent(OpenAIChatModel(MODEL, provider=provider), model_settings={"temperature": 0})
    agent.tool_plain(calculator)
    result = agent.run_sync(LONG.prompt)
    assert str(result.output).strip() == BOXED
