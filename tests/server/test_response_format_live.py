"""JSON answers (``response_format``) from the real engine, both engines, through the
OpenAI SDK: the thinking stays free and the answer holds to the schema (plain, streamed,
the SDK's ``parse``), self-consistency votes on a field of the answer, the step search,
PETS and budget guidance hold their answers to it, and an answer cut by its solution
budget is reported as cut."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

QUESTION = make_questions("test", 1, seed=11, min_ops=2, max_ops=3)[0].prompt
MESSAGES = [{"role": "user", "content": QUESTION}]
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


class Answer(BaseModel):
    answer: int


def _holds(content: str) -> int:
    """The answer of ``content`` if it is valid against SCHEMA (pydantic checks it)."""
    return Answer.model_validate_json(content, strict=True).answer


def test_plain_answers_hold_to_the_schema_after_free_thinking(
    openai_client: Any, served_model: str
) -> None:
    r = openai_client.chat.completions.create(
        model=served_model, messages=MESSAGES, response_format=FORMAT, n=3, max_tokens=200
    )
    for choice in r.choices:
        assert choice.finish_reason == "stop"
        _holds(choice.message.content)
        # The grammar waited for </think>: the thinking is the testbed's arithmetic.
        assert "=" in choice.message.reasoning_content


@pytest.mark.local_only  # the remote engine's wire is the plain and elastic tests
def test_streamed_answer_and_the_sdk_parse_helper(openai_client: Any, served_model: str) -> None:
    stream = openai_client.chat.completions.create(
        model=served_model, messages=MESSAGES, response_format=FORMAT, stream=True
    )
    content = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    _holds(content)
    parsed = openai_client.beta.chat.completions.parse(
        model=served_model, messages=MESSAGES, response_format=Answer
    )
    assert isinstance(parsed.choices[0].message.parsed, Answer)
    # The Responses API's text.format, as the SDK's responses.parse sends it.
    reply = openai_client.responses.parse(model=served_model, input=QUESTION, text_format=Answer)
    assert isinstance(reply.output_parsed, Answer)


@pytest.mark.local_only
def test_self_consistency_votes_on_the_named_field(openai_client: Any, served_model: str) -> None:
    r = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        response_format=FORMAT,
        extra_body={"strategy": "self-consistency", "budget": {"samples": 6}},
    )
    info = r.model_extra["thinkgate"]
    chosen = _holds(r.choices[0].message.content)
    classes = info["classes"]
    # Canonical JSON values: the winning class is the answer returned.
    assert json.loads(next(c["answer"] for c in classes if c["selected"])) == {"answer": chosen}
    assert sum(c["count"] for c in classes) + info["unanswered"] == 6
    r = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        response_format=FORMAT,
        extra_body={
            "strategy": "self-consistency",
            "budget": {"samples": 6},
            "answer_field": "answer",
        },
    )
    info = r.model_extra["thinkgate"]
    winner = next(c for c in info["classes"] if c["selected"])
    assert json.loads(winner["answer"]) == _holds(r.choices[0].message.content)


@pytest.mark.local_only  # one request each: the grammar is the same engine call as above
@pytest.mark.parametrize(
    ("strategy", "body"),
    [
        ("beam-search", {"budget": {"samples": 2}, "expansions": 1}),
        ("pets", {"budget": {"samples": 4}, "cap": 4}),
        ("budget-guidance", {"budget": {"thinking": 24}}),
    ],
)
def test_search_pets_and_guidance_answer_in_the_schema(
    openai_client: Any, served_model: str, strategy: str, body: dict[str, Any]
) -> None:
    r = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        response_format=FORMAT,
        max_tokens=200,
        extra_body={"strategy": strategy, **body},
    )
    assert r.choices[0].finish_reason == "stop", r.model_extra["thinkgate"]
    _holds(r.choices[0].message.content)
    assert "=" in r.choices[0].message.reasoning_content  # free thinking before it


def test_an_answer_cut_by_its_solution_budget_is_reported_cut(
    openai_client: Any, served_model: str
) -> None:
    def elastic(solution: int) -> Any:
        return openai_client.chat.completions.create(
            model=served_model,
            messages=MESSAGES,
            response_format=FORMAT,
            extra_body={"strategy": "elastic", "budget": {"thinking": 48, "solution": solution}},
        )

    cut = elastic(3)
    assert cut.choices[0].finish_reason == "length"
    info = cut.model_extra["thinkgate"]
    assert info["mode"] == "two-pass" and info["choices"][0]["solution_cut"] is True
    with pytest.raises(ValueError):
        json.loads(cut.choices[0].message.content)  # cut JSON, reported as cut
    fits = elastic(40)
    assert fits.choices[0].finish_reason == "stop"
    assert fits.model_extra["thinkgate"]["choices"][0]["solution_cut"] is False
    _holds(fits.choices[0].message.content)


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@pytest.mark.parametrize("forced", ["response_format", "tool_choice", "streamed"])
def test_a_sample_that_ends_inside_its_thinking_still_answers(
    openai_client: Any, served_model: str, testbed_tokens: Any, forced: str
) -> None:
    """EOS biased up draws it as the first token, inside the thinking: the grammar, which
    starts at </think>, never held the sample. The answer comes all the same, held to the
    grammar (strategies.forced_answer), and the bias cannot end it early: the grammar
    allows EOS only once the JSON is complete."""
    eos = testbed_tokens.eos_token_ids[0]
    common: dict[str, Any] = {
        "model": served_model,
        "messages": MESSAGES,
        "max_tokens": 200,
        "temperature": 0,
        "logit_bias": {str(eos): 100},
    }
    if forced == "tool_choice":
        r = openai_client.chat.completions.create(
            **common, tools=[ADD_TOOL], tool_choice="required"
        )
        assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
        (call,) = r.choices[0].message.tool_calls
        assert call.function.name == "add"
        assert set(json.loads(call.function.arguments)) >= {"a", "b"}
        return
    if forced == "streamed":
        stream = openai_client.chat.completions.create(
            **common, response_format=FORMAT, stream=True
        )
        chunks = [c for c in stream if c.choices]
        content = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == [
            "stop"
        ]
        _holds(content)
        return
    r = openai_client.chat.completions.create(**common, response_format=FORMAT)
    assert r.choices[0].finish_reason == "stop", r.choices[0]
    _holds(r.choices[0].message.content)
    assert not r.choices[0].message.reasoning_content  # it thought nothing: EOS came first
