"""Tool calls (chat ``tools``) without vLLM: reading calls out of an answer, their vote
keys, and what the gateway answers over a scripted engine (non-streamed and streamed,
plain and self-consistency). The tool-calling testbed model end to end, through the
OpenAI SDK: tests/server/test_tool_calls_live.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from strategies.answers import group_answers
from strategies.tool_calls import (
    KEY_PREFIX,
    CallForm,
    ToolCall,
    parse_tool_calls,
    read_calls,
    vote_key,
)

CALL = (
    '<tool_call>{"name": "calculator", "arguments": {"expression": "3+4", "modulo": 10}}'
    "</tool_call>"
)
TOOL = {
    "type": "function",
    "function": {"name": "calculator", "parameters": {"type": "object"}},
}
QUESTION = [{"role": "user", "content": "Compute 3+4 mod 10."}]
SCHEMA = {
    "type": "object",
    "properties": {"expression": {"type": "string"}, "modulo": {"type": "integer"}},
}


def test_complete_calls_are_read_and_the_rest_stays_text() -> None:
    parsed = parse_tool_calls(f"Let me call.\n{CALL}{CALL}")
    assert parsed.content == "Let me call."
    assert (
        parsed.calls
        == (ToolCall(name="calculator", arguments='{"expression": "3+4", "modulo": 10}'),) * 2
    )
    # Cut by a budget (no closing tag) or broken JSON: text, never a call.
    cut = CALL[:40]
    assert parse_tool_calls(cut).calls == () and parse_tool_calls(cut).content == cut
    broken = "<tool_call>{name: calculator}</tool_call>"
    assert parse_tool_calls(broken).content == broken
    no_args = '<tool_call>{"name": "f", "arguments": [1]}</tool_call>'
    assert parse_tool_calls(no_args).calls == ()
    assert parse_tool_calls("\n\\boxed{7}").content == "\n\\boxed{7}"  # untouched


def test_one_call_forms_keep_the_first_call_only() -> None:
    first = '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    second = '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    text = f"before {first} between {second} after"
    both = read_calls(text, CallForm("tags"))
    one = read_calls(text, CallForm("tags", single=True))
    assert [c.name for c in both.calls] == ["f", "g"]
    assert one.calls == both.calls[:1] and one.content == both.content
    array = '[{"name": "f", "parameters": {}}, {"name": "g", "parameters": {}}]'
    assert [c.name for c in read_calls(array, CallForm("required", single=True)).calls] == ["f"]


def test_calls_vote_as_canonical_values_never_as_mathematics() -> None:
    a = vote_key('<tool_call>{"name": "f", "arguments": {"b": 1, "a": 2}}</tool_call>')
    b = vote_key('<tool_call>{"arguments": {"a": 2, "b": 1}, "name": "f"}</tool_call>')
    c = vote_key('<tool_call>{"name": "f", "arguments": {"a": 2, "b": 1.0}}</tool_call>')
    assert a == b == KEY_PREFIX + '[["f",{"a":2,"b":1}]]' and c != a
    assert vote_key("\\boxed{7}") is None
    groups = group_answers([a, "7", b, c, "7.0"])
    assert [g.members for g in groups] == [(0, 2), (1, 4), (3,)]  # numbers still math


def _model(tokens: Any, texts: Sequence[str], seen: list[GenerateRequest]) -> Any:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        seen.append(request)
        return samples_of(tokens, *(f"3+4=7\n</think>{t}" for t in texts[: request.sampling.n]))

    return handler


async def test_plain_answers_with_tool_calls(scripted_app: Any, testbed_tokens: Any) -> None:
    seen: list[GenerateRequest] = []
    async with scripted_app(_model(testbed_tokens, [CALL], seen)) as app:
        body = {"model": app.model, "messages": QUESTION, "tools": [TOOL]}
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] is None
        (call,) = choice["message"]["tool_calls"]
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert call["function"]["name"] == "calculator"
        assert json.loads(call["function"]["arguments"]) == {"expression": "3+4", "modulo": 10}
        # Streamed: reasoning live, the answer held back and sent as calls at the end.
        r = await app.client.post("/v1/chat/completions", json={**body, "stream": True})
        frames = [
            orjson.loads(line[6:])
            for line in r.text.splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"
        ]
        deltas = [f["choices"][0] for f in frames if f["choices"]]
        assert "".join(d["delta"].get("reasoning_content", "") for d in deltas) == "3+4=7\n"
        assert not any(d["delta"].get("content") for d in deltas)
        # OpenAI's pieces: the id and name, then the arguments.
        head, args = [p for d in deltas for p in d["delta"].get("tool_calls", [])]
        assert head["index"] == args["index"] == 0 and head["id"].startswith("call_")
        assert head["function"] == {"name": "calculator", "arguments": ""}
        assert args["function"] == {"arguments": call["function"]["arguments"]}
        assert deltas[-1]["finish_reason"] == "tool_calls"
        # tool_choice none keeps the tools from the model: its answer is text.
        r = await app.client.post("/v1/chat/completions", json={**body, "tool_choice": "none"})
        assert r.json()["choices"][0]["message"]["content"] == CALL
        assert r.json()["choices"][0]["finish_reason"] == "stop"


async def test_a_tool_turn_given_back_reaches_the_template(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    seen: list[GenerateRequest] = []
    async with scripted_app(_model(testbed_tokens, ["\\boxed{7}"], seen)) as app:
        said = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": '{"expression": "3+4"}'},
                }
            ],
        }
        turns = [*QUESTION, said, {"role": "tool", "tool_call_id": "call_1", "content": "7"}]
        body = {"model": app.model, "messages": turns, "tools": [TOOL]}
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "\\boxed{7}"
        prompt = testbed_tokens.decode(seen[0].prompt_token_ids)
        assert "7" in prompt.split("Compute 3+4 mod 10.")[1]  # the tool's result
        said["tool_calls"][0]["function"]["arguments"] = "not json"  # type: ignore[index]
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


async def test_self_consistency_votes_on_the_calls(scripted_app: Any, testbed_tokens: Any) -> None:
    other = CALL.replace("3+4", "3-4")
    reordered = (
        '<tool_call>{"arguments": {"modulo": 10, "expression": "3+4"}, "name": "calculator"}'
        "</tool_call>"
    )
    pool = [other, CALL, "\\boxed{7}", reordered, other[:30]]
    seen: list[GenerateRequest] = []
    async with scripted_app(_model(testbed_tokens, pool, seen)) as app:
        body = {
            "model": app.model,
            "messages": QUESTION,
            "tools": [TOOL],
            "strategy": "self-consistency",
            "budget": {"samples": 5},
        }
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        choice = out["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        args = json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
        assert args["expression"] == "3+4"  # two votes against one
        counts = sorted(c["count"] for c in out["thinkgate"]["classes"])
        assert counts == [1, 1, 2]  # the cut call (text without a number) has no vote


async def test_forced_calls_hold_the_answer_to_json_and_read_it_as_calls(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    args = '{"expression": "3+4", "modulo": 10}'
    required = f'[{{"name": "calculator", "parameters": {args}}}]'
    seen: list[GenerateRequest] = []
    answers = iter([args, required, args[:12]])

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        seen.append(request)
        answer = next(answers)
        cut = answer == args[:12]
        return samples_of(
            testbed_tokens, f"3+4=7\n</think>{answer}", finish_reason="length" if cut else "stop"
        )

    tool = {**TOOL, "function": {**TOOL["function"], "parameters": SCHEMA}}  # type: ignore[dict-item]
    named = {"type": "function", "function": {"name": "calculator"}}
    async with scripted_app(handler) as app:
        body = {"model": app.model, "messages": QUESTION, "tools": [tool]}
        r = await app.client.post("/v1/chat/completions", json={**body, "tool_choice": named})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop"  # a named function: OpenAI's "stop"
        assert choice["message"]["content"] is None
        (call,) = choice["message"]["tool_calls"]
        assert call["function"] == {"name": "calculator", "arguments": args}
        assert json.loads(seen[0].sampling.structured.schema) == SCHEMA  # type: ignore[union-attr]
        r = await app.client.post("/v1/chat/completions", json={**body, "tool_choice": "required"})
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["calculator"]
        schema = json.loads(seen[1].sampling.structured.schema)  # type: ignore[union-attr]
        assert schema["type"] == "array" and schema["minItems"] == 1
        assert schema["items"]["anyOf"][0]["properties"]["parameters"] == SCHEMA
        # Cut by max_tokens: no call, the cut JSON as text, "length".
        r = await app.client.post(
            "/v1/chat/completions", json={**body, "tool_choice": named, "max_tokens": 20}
        )
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]
        assert choice["message"]["content"] == args[:12]


async def test_budget_guidance_offers_tools_and_reads_the_call(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    """The guidance processor steers thinking (tests/strategies/test_budget_guidance_api.py);
    the call it ends with comes out as tool_calls, alone and through a vote of samples."""
    seen: list[GenerateRequest] = []
    async with scripted_app(
        _model(testbed_tokens, [CALL] * 3, seen), processors=frozenset({"guidance"})
    ) as app:
        for samples in (1, 3):
            r = await app.client.post(
                "/v1/chat/completions",
                json={
                    "model": app.model,
                    "messages": QUESTION,
                    "tools": [TOOL],
                    "strategy": "budget-guidance",
                    "budget": {"thinking": 40, "samples": samples},
                },
            )
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["finish_reason"] == "tool_calls"
            assert choice["message"]["tool_calls"][0]["function"]["name"] == "calculator"
        assert seen[0].sampling.extra_args  # the guidance's arguments went with the call
