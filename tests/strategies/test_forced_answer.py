"""A forced answer always comes (``strategies.forced_answer``): a sample held to a grammar
(a forced ``tool_choice``, a ``response_format``) that ends with EOS inside its thinking
is continued under the grammar (prompt + thinking + ``</think>``), through the app with a
scripted engine and on the wrapper itself; what a client's stop, a length cut or a full
context ended is left as it is, and a sample with no room for its answer says ``length``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from core.allowance import BudgetSpent
from core.engine import GenerateRequest, Sample, SamplingConfig, StructuredOutput
from engines.scripted import ScriptedEngine, samples_of
from kernels.elastic import args as elastic_args
from strategies.forced_answer import ForcedAnswers

pytestmark = pytest.mark.asyncio

THOUGHT = "so 3+4 is"  # the thinking, never closed: EOS follows it
CALLS = [{"name": "add", "parameters": {"a": 3, "b": 4}}]
TOOL = {
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
FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "properties": {"answer": {"type": "integer"}}},
    },
}
JSON = StructuredOutput(kind="json_object")


def _closed(tokens: Any, request: GenerateRequest) -> bool:
    end: tuple[int, ...] = tokens.think_end_ids
    return request.prompt_token_ids[-len(end) :] == end


def _thinks_then(tokens: Any, answer: str) -> Callable[[GenerateRequest], list[Sample]]:
    """A model that ends inside its thinking, and answers ``answer`` once its prompt
    closes the thinking (a grammar-bound call's continuation)."""

    def handle(request: GenerateRequest) -> list[Sample]:
        if _closed(tokens, request):
            assert request.sampling.structured is not None  # the answer holds to the grammar
            return samples_of(tokens, answer)
        return samples_of(tokens, *[THOUGHT] * request.sampling.n)

    return handle


@pytest.mark.parametrize("stream", [False, True])
async def test_a_forced_call_comes_though_the_sample_ended_inside_its_thinking(
    scripted_app: Callable[..., Any], testbed_tokens: Any, stream: bool
) -> None:
    handler = _thinks_then(testbed_tokens, json.dumps(CALLS))
    async with scripted_app(handler) as app:
        body = {
            "model": app.model,
            "messages": [{"role": "user", "content": "Add 3 and 4."}],
            "tools": [TOOL],
            "tool_choice": "required",
            "max_tokens": 200,
        }
        client = app.openai()
        if not stream:
            r = await client.chat.completions.create(**body)
            choice = r.choices[0]
            calls, finish = choice.message.tool_calls, choice.finish_reason
            assert choice.message.reasoning_content.strip() == THOUGHT
        else:
            chunks = [c async for c in await client.chat.completions.create(**body, stream=True)]
            pieces = [p for c in chunks for ch in c.choices for p in ch.delta.tool_calls or []]
            calls = [p for p in pieces if p.function and p.function.name]
            finish = next(ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason)
        assert finish == "tool_calls"
        assert [c.function.name for c in calls] == ["add"]
        first, answer = app.engine.calls
        # The answer's call: the sample's thinking, its EOS dropped, closed by </think>.
        thought = testbed_tokens.encode(THOUGHT)
        end = testbed_tokens.think_end_ids
        assert answer.prompt_token_ids == (*first.prompt_token_ids, *thought, *end)
        assert answer.sampling.max_tokens == 200 - len(thought) - len(end)


async def test_a_response_format_answer_comes_on_every_choice(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    handler = _thinks_then(testbed_tokens, '{"answer": 7}')
    async with scripted_app(handler) as app:
        r = await app.openai().chat.completions.create(
            model=app.model,
            messages=[{"role": "user", "content": "3+4?"}],
            response_format=FORMAT,
            n=2,
        )
        assert [json.loads(c.message.content) for c in r.choices] == [{"answer": 7}] * 2
        assert [c.finish_reason for c in r.choices] == ["stop", "stop"]
        n = len(testbed_tokens.encode(THOUGHT)) + len(testbed_tokens.think_end_ids)
        answer = len(testbed_tokens.encode('{"answer": 7}')) + 1  # its EOS
        # Usage counts what was generated and kept: thinking, </think>, the answer.
        assert r.usage.completion_tokens == 2 * (n + answer)


def _request(tokens: Any, **sampling: Any) -> GenerateRequest:
    prompt = tuple(tokens.render_chat([{"role": "user", "content": "3+4?"}]))
    config = SamplingConfig(structured=JSON, **sampling)
    return GenerateRequest(request_id="r", prompt_token_ids=prompt, sampling=config)


async def test_elastic_budgets_continue_in_the_answer_phase(testbed_tokens: Any) -> None:
    engine = ScriptedEngine(_thinks_then(testbed_tokens, "{}"), tokens=testbed_tokens)
    extra = {elastic_args.THINKING_BUDGET: 50, elastic_args.SOLUTION_BUDGET: 20}
    (s,) = await ForcedAnswers(engine).generate(
        _request(testbed_tokens, max_tokens=71, seed=5, extra_args=extra)
    )
    answer = engine.calls[1].sampling
    assert answer.extra_args == {**extra, elastic_args.THINKING_OPEN: 0}
    assert answer.seed == 5 and answer.n == 1
    assert testbed_tokens.decode(s.token_ids) == THOUGHT + "{}"
    assert s.finish_reason == "stop"


@pytest.mark.parametrize(
    "case",
    ["closed", "client stop", "length", "no grammar"],
)
async def test_what_needs_no_answer_is_left_alone(testbed_tokens: Any, case: str) -> None:
    def handle(request: GenerateRequest) -> list[Sample]:
        if case == "closed":
            return samples_of(testbed_tokens, "<think>x</think>{}")
        (s,) = samples_of(
            testbed_tokens, THOUGHT, finish_reason="length" if case == "length" else "stop"
        )
        return [
            Sample(
                index=0,
                token_ids=s.token_ids,
                finish_reason=s.finish_reason,
                stop_reason="is" if case == "client stop" else None,
            )
        ]

    engine = ScriptedEngine(handle, tokens=testbed_tokens)
    request = _request(testbed_tokens)
    if case == "no grammar":
        request = GenerateRequest(
            request_id="r", prompt_token_ids=request.prompt_token_ids, sampling=SamplingConfig()
        )
    wrapped = ForcedAnswers(engine)
    (got,) = await wrapped.generate(request)
    deltas = [d async for d in wrapped.stream(request)]
    assert len(engine.calls) == 2  # one generate, one stream: no answer call
    assert got == handle(request)[0]
    assert sum((d.token_ids for d in deltas), ()) == got.token_ids


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("limit", ["max_tokens", "ceiling"])
async def test_no_room_for_the_answer_is_a_cut(
    testbed_tokens: Any, stream: bool, limit: str
) -> None:
    answer = _thinks_then(testbed_tokens, "{}")

    def handle(request: GenerateRequest) -> list[Sample]:
        if limit == "ceiling" and _closed(testbed_tokens, request):
            raise BudgetSpent("tokens", "the request's ceiling has no room for this call")
        return answer(request)

    engine = ScriptedEngine(handle, tokens=testbed_tokens)
    used = len(testbed_tokens.encode(THOUGHT)) + len(testbed_tokens.think_end_ids)
    # max_tokens: </think> fits, the answer not; ceiling: the meter refuses the call.
    request = _request(testbed_tokens, max_tokens=used if limit == "max_tokens" else 100)
    wrapped = ForcedAnswers(engine)
    if stream:
        deltas = [d async for d in wrapped.stream(request)]
        finish = deltas[-1].finish_reason
        assert [d.finish_reason for d in deltas].count(None) == len(deltas) - 1
    else:
        (s,) = await wrapped.generate(request)
        finish = s.finish_reason
    assert finish == "length"
    assert len(engine.calls) == (1 if limit == "max_tokens" else 2)


async def test_a_batch_continues_only_its_unanswered_samples(testbed_tokens: Any) -> None:
    def handle(request: GenerateRequest) -> list[Sample]:
        if _closed(testbed_tokens, request):
            return samples_of(testbed_tokens, "{}")
        return samples_of(testbed_tokens, THOUGHT, "x</think>{}", THOUGHT)

    engine = ScriptedEngine(handle, tokens=testbed_tokens)
    wrapped = ForcedAnswers(engine)
    request = _request(testbed_tokens, n=3, seed=10)
    (samples,) = await wrapped.generate_batch([request])
    streamed: dict[int, list[int]] = {}
    async for d in wrapped.stream(request):
        streamed.setdefault(d.index, []).extend(d.token_ids)
    texts = [testbed_tokens.decode(s.token_ids) for s in samples]
    assert texts == [THOUGHT + "{}", "x{}", THOUGHT + "{}"]
    assert [tuple(streamed[i]) for i in range(3)] == [s.token_ids for s in samples]
    # Samples 0 and 2 answered, each with its own seed (child j drew with seed + j).
    assert [c.sampling.seed for c in engine.calls if _closed(testbed_tokens, c)] == [10, 12] * 2
