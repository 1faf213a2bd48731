"""/v1/responses and /v1/messages over a scripted engine (the fast tier): the body each
becomes, the answer and the stream each sends back, the effort table and the output
limit on every route, and every refusal a 400 in the route's own envelope."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from core.base import Choice, ChoiceDelta, Result, Usage
from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.apis.blocks import Blocks, Closed, Opened, Text, of_result

ANSWER = "3+4=7\n</think>\\boxed{7}"
MSG = [{"role": "user", "content": "Compute 3+4 mod 10."}]


def _handler(tokens: Any) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *[ANSWER] * request.sampling.n)

    return handler


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every named SSE event, in order (comments skipped)."""
    out = []
    for frame in text.split("\n\n"):
        lines = [line for line in frame.splitlines() if not line.startswith(":")]
        if not lines:
            continue
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        out.append((lines[0][7:], json.loads(lines[1][6:])))
    return out


def _no_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


# --- /v1/responses


async def test_responses_answer_with_reasoning_and_message_items(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "input": "Compute 3+4 mod 10.", "metadata": {"a": "b"}}
        got = await app.client.post("/v1/responses", json=body)
    assert got.status_code == 200, got.text
    assert got.headers["X-Budget-Applied"] == "none" and got.headers["X-Request-Id"]
    r = got.json()
    assert r["object"] == "response" and r["status"] == "completed"
    assert r["id"] == f"resp_{got.headers['X-Request-Id']}"
    reasoning, message = r["output"]
    assert reasoning["type"] == "reasoning" and reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "3+4=7\n"}]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0]["type"] == "output_text"
    assert message["content"][0]["text"] == "\\boxed{7}"
    usage = r["usage"]
    assert usage["output_tokens"] == len(testbed_tokens.encode(ANSWER)) + 1  # EOS
    assert usage["output_tokens_details"]["reasoning_tokens"] == 6
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert r["metadata"] == {"a": "b"} and r["store"] is True  # kept (server.apis.responses.store)
    assert r["thinkgate"]["strategy"] == "plain"


async def test_responses_stream_carries_the_same_answer_in_typed_events(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "input": MSG, "instructions": "Be brief."}
        plain = (await app.client.post("/v1/responses", json=body)).json()
        got = await app.client.post("/v1/responses", json={**body, "stream": True})
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/event-stream")
    events = _events(got.text)
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(data["type"] == name for name, data in events)
    first_text = names.index("response.output_text.delta")
    assert names.index("response.reasoning_text.delta") < first_text
    assert names.index("response.output_item.done") < first_text  # reasoning closed first
    reasoning = "".join(d["delta"] for n, d in events if n == "response.reasoning_text.delta")
    answer = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert reasoning == plain["output"][0]["content"][0]["text"]
    assert answer == plain["output"][1]["content"][0]["text"]
    final = events[-1][1]["response"]
    assert _no_ids(final["output"]) == _no_ids(plain["output"])
    assert final["usage"] == plain["usage"]
    assert final["instructions"] == "Be brief." and final["thinkgate"]["strategy"] == "plain"


async def test_a_summary_asked_for_is_the_reasoning_text(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {
            "model": app.model,
            "input": "Compute 3+4 mod 10.",
            "reasoning": {"summary": "auto"},
        }
        plain = (await app.client.post("/v1/responses", json=body)).json()
        streamed = await app.client.post("/v1/responses", json={**body, "stream": True})
    reasoning = plain["output"][0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "3+4=7\n"}]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "3+4=7\n"}]
    assert plain["reasoning"]["summary"] == "auto"
    events = _events(streamed.text)
    deltas = [d["delta"] for n, d in events if n == "response.reasoning_summary_text.delta"]
    assert "".join(deltas) == "3+4=7\n"
    names = [n for n, _ in events]
    assert names.index("response.reasoning_summary_part.added") < names.index(
        "response.reasoning_summary_part.done"
    )
    done = next(d for n, d in events if n == "response.output_item.done")
    assert done["item"]["summary"] == reasoning["summary"]


async def test_output_items_given_back_are_the_next_turns_history(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        first = await app.client.post("/v1/responses", json={"model": app.model, "input": "hi"})
        history = [{"role": "user", "content": "hi"}, *first.json()["output"]]
        second = await app.client.post(
            "/v1/responses",
            json={"model": app.model, "input": [*history, {"role": "user", "content": "again"}]},
        )
        assert second.status_code == 200, second.text
        # The earlier turn's thinking reaches the template as that turn's reasoning.
        prompt = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        assert "\\boxed{7}" in prompt and "again" in prompt


async def test_multi_sample_strategy_replays_the_chosen_answer(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    headers = {"X-Strategy": "self-consistency", "X-Budget-Samples": "3"}
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "input": "Compute 3+4 mod 10.", "stream": True}
        got = await app.client.post("/v1/responses", json=body, headers=headers)
    events = _events(got.text)
    final = events[-1][1]["response"]
    assert final["output"][1]["content"][0]["text"] == "\\boxed{7}"
    assert final["thinkgate"]["samples"] == 3
    # Exact over every sample: three times one sample's tokens.
    assert final["usage"]["output_tokens"] == 3 * (len(testbed_tokens.encode(ANSWER)) + 1)


async def test_effort_is_a_budget_fitted_under_the_output_limit_on_every_route(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        m = app.model
        # The table: low is 3/32 of the 512-token context.
        r = await app.client.post(
            "/v1/responses", json={"model": m, "input": "x", "reasoning": {"effort": "low"}}
        )
        # An effort alone is a plan: auto within 2 samples' worth (48 + 16 + 2 each).
        assert r.headers["X-Budget-Applied"] == "thinking=48;tokens=132"
        assert r.json()["reasoning"]["effort"] == "low"
        assert r.json()["thinkgate"]["strategy"] == "auto"
        # high (320) under max_output_tokens 100: 100 - </think> - 16 reserved = 83.
        body = {"model": m, "input": "x", "reasoning": {"effort": "high"}, "max_output_tokens": 100}
        r = await app.client.post("/v1/responses", json=body)
        assert r.headers["X-Budget-Applied"] == "thinking=83;tokens=2704"
        chat = {"model": m, "messages": MSG, "reasoning_effort": "high", "max_tokens": 100}
        r = await app.client.post("/v1/chat/completions", json=chat)
        assert r.headers["X-Budget-Applied"] == "thinking=83;tokens=2704"
        # An explicit budget wins over the effort, and is fitted the same way.
        r = await app.client.post(
            "/v1/chat/completions",
            json={**chat, "budget": {"thinking": 10}},
        )
        assert r.headers["X-Budget-Applied"] == "thinking=10"
        r = await app.client.post(
            "/v1/chat/completions",
            json={**chat, "max_tokens": 40},
            headers={"X-Budget-Thinking": "30", "X-Budget-Solution": "20"},
        )
        assert r.headers["X-Budget-Applied"] == "thinking=19;solution=20"
        # Anthropic's budget_tokens, under max_tokens.
        msgs = {"model": m, "max_tokens": 64, "messages": MSG}
        thinking = {"type": "enabled", "budget_tokens": 60}
        r = await app.client.post("/v1/messages", json={**msgs, "thinking": thinking})
        assert r.headers["X-Budget-Applied"] == "thinking=47"
        r = await app.client.post(
            "/v1/messages",
            json={**msgs, "thinking": thinking},
            headers={"X-Budget-Thinking": "5"},
        )
        assert r.headers["X-Budget-Applied"] == "thinking=5"  # the header wins
        r = await app.client.post("/v1/messages", json={**msgs, "thinking": {"type": "disabled"}})
        assert r.headers["X-Budget-Applied"] == "thinking=0"
        assert r.json()["thinkgate"]["strategy"] == "elastic"


# --- /v1/messages


async def test_messages_answer_and_stream_agree(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "max_tokens": 64, "system": "Be brief.", "messages": MSG}
        plain = await app.client.post("/v1/messages", json=body)
        streamed = await app.client.post("/v1/messages", json={**body, "stream": True})
        seal = app.asgi.state.gateway.seal
    assert plain.status_code == 200, plain.text
    m = plain.json()
    assert m["type"] == "message" and m["id"] == f"msg_{plain.headers['X-Request-Id']}"
    thinking, text = m["content"]
    signature = thinking.pop("signature")
    assert thinking == {"type": "thinking", "thinking": "3+4=7\n"}
    # The signature is this server's seal of the thinking (opened when it comes back).
    assert seal.open(signature, "messages.thinking", param="s") == "3+4=7\n"
    assert text["type"] == "text" and text["text"] == "\\boxed{7}"
    assert text["citations"] is None  # present, as the Messages API's text block has it
    assert text["thinkgate"] == {"index": 0, "finish_reason": "stop"}
    assert m["stop_reason"] == "end_turn" and m["stop_sequence"] is None
    assert m["usage"]["output_tokens"] == len(testbed_tokens.encode(ANSWER)) + 1
    assert m["usage"]["output_tokens_details"] == {"thinking_tokens": 6}
    events = _events(streamed.text)
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[1:-2] == (
        ["content_block_start"]
        + ["content_block_delta"] * 7  # six thinking deltas, then its signature_delta
        + ["content_block_stop"]
        + ["content_block_start"]
        + ["content_block_delta"] * 9
        + ["content_block_stop"]
    )
    blocks: dict[int, str] = {}
    for name, data in events:
        if name == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "signature_delta":
                assert seal.open(delta["signature"], "messages.thinking", param="s") == "3+4=7\n"
                continue
            blocks[data["index"]] = blocks.get(data["index"], "") + delta.get(
                "thinking", delta.get("text", "")
            )
    assert blocks == {0: "3+4=7\n", 1: "\\boxed{7}"}
    assert events[-3][1]["thinkgate"] == text["thinkgate"]  # the answer's content_block_stop
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] == m["usage"]["output_tokens"]
    assert delta["thinkgate"]["strategy"] == "plain"


async def test_three_turns_each_sending_the_last_answer_back(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """Anthropic's multi-turn pattern: the answer's ``content`` (thinking with its
    signature, text with this server's ``thinkgate`` details) is the next assistant turn."""
    seen: list[GenerateRequest] = []

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        seen.append(request)
        return samples_of(testbed_tokens, *[ANSWER] * request.sampling.n)

    async with scripted_app(handler) as app:
        messages: list[dict[str, Any]] = list(MSG)
        for turn in range(3):
            body = {"model": app.model, "max_tokens": 64, "messages": messages}
            got = await app.client.post("/v1/messages", json=body)
            assert got.status_code == 200, (turn, got.text)
            messages += [
                {"role": "assistant", "content": got.json()["content"]},
                {"role": "user", "content": "And plus 1?"},
            ]
    assert len(seen) == 3
    assert (
        len(seen[2].prompt_token_ids)
        > len(seen[1].prompt_token_ids)
        > len(seen[0].prompt_token_ids)
    )


async def test_a_stop_sequence_is_reported(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        # vLLM stops at a stop string without EOS and names it in stop_reason.
        (sample,) = samples_of(testbed_tokens, "3+4=7\n</think>\\boxed{7", finish_reason="length")
        return [Sample(index=0, token_ids=sample.token_ids, finish_reason="stop", stop_reason="}")]

    async with scripted_app(handler) as app:
        body = {"model": app.model, "max_tokens": 64, "messages": MSG, "stop_sequences": ["}"]}
        got = (await app.client.post("/v1/messages", json=body)).json()
    assert got["stop_reason"] == "stop_sequence" and got["stop_sequence"] == "}"


# --- refusals, each in its route's envelope

RESPONSES_BAD = [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"background": True}, "background"),
    # Hosted tools are left out of the prompt; forcing one is a 400.
    ({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}, "tool_choice"),
    ({"include": ["message.output_text.logprobs"]}, "include"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"text": {"format": {"type": "json_schema"}}}, "text.format"),  # no name
    ({"text": {"format": {"type": "json_object"}}, "strategy": "deepconf"}, "text.format"),
    ({"n": 2}, "n"),  # a chat field has no second way in
    ({"messages": MSG}, "messages"),
    ({"alhpa": 1}, "alhpa"),
    ({"temperature": "hot"}, "temperature"),
    ({"input": 5}, "input"),
    ({"input": []}, "input"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input.0.call_id"),
    ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input.0.type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input.0.content.0"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input.0.role"),
    ({"reasoning": {"effort": "ultra"}}, "reasoning.effort"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"max_output_tokens": 5000}, "max_output_tokens"),  # past the context
    ({"strategy": "plain", "reasoning": {"effort": "low"}}, "reasoning.effort"),
]


async def test_responses_text_format_becomes_the_answers_grammar(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    seen: list[GenerateRequest] = []

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        seen.append(request)
        return samples_of(testbed_tokens, '3+4=7\n</think>{"answer":7}')

    fmt = {"type": "json_schema", "name": "a", "schema": {"type": "object"}, "strict": True}
    async with scripted_app(handler) as app:
        body = {"model": app.model, "input": "Compute 3+4 mod 10.", "text": {"format": fmt}}
        got = await app.client.post("/v1/responses", json=body)
    assert got.status_code == 200, got.text
    r = got.json()
    assert r["output"][-1]["content"][0]["text"] == '{"answer":7}'
    assert r["text"] == {"format": fmt}  # repeated as sent
    structured = seen[0].sampling.structured
    assert structured is not None and json.loads(structured.schema or "") == {"type": "object"}


@pytest.mark.parametrize(("extra", "param"), RESPONSES_BAD)
async def test_responses_refusals_name_the_field(
    scripted_app: Callable[..., Any], testbed_tokens: Any, extra: dict[str, Any], param: str
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "input": "hi", **extra}
        got = await app.client.post("/v1/responses", json=body)
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param, error


MESSAGES_BAD = [
    (
        {
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "tool", "name": "web_search"},
        },
        "tool_choice.name",
    ),
    ({"tools": [{"type": "web search", "name": "web_search"}]}, "tools.0.type"),
    ({"tool_choice": {"type": "any"}}, "tool_choice"),
    ({"alhpa": 1}, "alhpa"),
    ({"n": 2}, "n"),
    ({"max_tokens": "64"}, "max_tokens"),
    ({"temperature": 1.5}, "temperature"),
    ({"thinking": {"type": "enabled", "budget_tokens": 64}}, "thinking.budget_tokens"),
    ({"thinking": {"type": "enabled"}}, "thinking.enabled.budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 8}, "budget": {"thinking": 4}}, "thinking"),
    ({"thinking": {"type": "disabled"}, "strategy": "plain"}, "thinking"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, None),
    ({"messages": [*MSG, {"role": "assistant", "content": "The answer is"}]}, None),
    ({"messages": []}, "messages"),
    ({"stop_sequences": "}"}, "stop_sequences"),
]


@pytest.mark.parametrize(("extra", "param"), MESSAGES_BAD)
async def test_messages_refusals_use_anthropics_envelope(
    scripted_app: Callable[..., Any],
    testbed_tokens: Any,
    extra: dict[str, Any],
    param: str | None,
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        body = {"model": app.model, "max_tokens": 64, "messages": MSG, **extra}
        got = await app.client.post("/v1/messages", json=body)
    assert got.status_code == 400, got.text
    answer = got.json()
    assert answer["type"] == "error" and answer["request_id"] == got.headers["X-Request-Id"]
    assert answer["error"]["type"] == "invalid_request_error"
    if param is not None:
        assert param in answer["error"]["message"], answer


async def test_messages_other_errors_keep_the_envelope(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), api_keys=("k",)) as app:
        body = {"model": app.model, "max_tokens": 8, "messages": MSG}
        denied = await app.client.post("/v1/messages", json=body)
        headers = {"Authorization": "Bearer k"}
        unknown = await app.client.post(
            "/v1/messages", json={**body, "model": "other"}, headers=headers
        )
        wrong_method = await app.client.get("/v1/messages", headers=headers)
        json_type = {**headers, "Content-Type": "application/json"}
        malformed = await app.client.post("/v1/messages", content=b"{", headers=json_type)
        plain_text = await app.client.post("/v1/messages", content=b"{}", headers=headers)
    assert denied.status_code == 401
    assert denied.json()["error"]["type"] == "authentication_error"
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
    assert wrong_method.status_code == 405 and wrong_method.json()["type"] == "error"
    assert malformed.status_code == 400 and malformed.json()["type"] == "error"
    assert plain_text.status_code == 415 and plain_text.json()["type"] == "error"


async def test_engine_failure_mid_stream_is_one_error_event(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    from core.errors import BackendUnavailable

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        raise BackendUnavailable("the engine is gone")

    async with scripted_app(handler) as app:
        body = {"model": app.model, "max_tokens": 8, "messages": MSG, "stream": True}
        got = await app.client.post("/v1/messages", json=body)
        responses = await app.client.post(
            "/v1/responses", json={"model": app.model, "input": "x", "stream": True}
        )
    # Refused before the first byte: a real status in the route's envelope.
    assert got.status_code == 503 and got.json()["error"]["type"] == "overloaded_error"
    assert responses.status_code == 503 and responses.json()["error"]["code"]


# --- blocks


def test_blocks_of_live_and_replayed_choices() -> None:
    blocks = Blocks()
    live = blocks.delta(ChoiceDelta(index=0, reasoning="a")) + blocks.delta(
        ChoiceDelta(index=0, content="b")
    )
    assert live == [
        Opened(0, "thinking"),
        Text(0, "thinking", "a"),
        Closed(0, "thinking", "a", None),
        Opened(1, "answer"),
        Text(1, "answer", "b"),
    ]
    one = Choice(index=0, reasoning="a", content="b", finish_reason="stop")
    two = Choice(index=1, reasoning="", content="c", finish_reason="length")
    final = Result(
        choices=(one, two),
        usage=Usage(prompt_tokens=1, completion_tokens=2, reasoning_tokens=1),
        samples=2,
    )
    assert blocks.final(final) == [
        Closed(1, "answer", "b", one),
        Opened(2, "answer"),
        Text(2, "answer", "c"),
        Closed(2, "answer", "c", two),
    ]
    assert [(b.kind, b.text) for b in of_result(final)] == [
        ("thinking", "a"),
        ("answer", "b"),
        ("answer", "c"),
    ]
    # A choice with no answer text still gets its (empty) answer block.
    quiet = Blocks()
    quiet.delta(ChoiceDelta(index=0, reasoning="x"))
    empty = Choice(index=0, reasoning="x", content="", finish_reason="length")
    result = Result(choices=(empty,), usage=final.usage, samples=1)
    assert quiet.final(result)[-2:] == [Opened(1, "answer"), Closed(1, "answer", "", empty)]
