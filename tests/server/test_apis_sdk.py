"""End to end: /v1/responses with the real ``openai`` SDK and /v1/messages with the real
``anthropic`` SDK, against the live server on the real vLLM engine (local and remote)."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import pytest

from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

EASY = make_questions("test", 1, seed=3, min_ops=1, max_ops=2)[0].prompt
HARD = make_questions("test", 1, seed=4, min_ops=8, max_ops=8)[0].prompt
LONGEST = make_questions("test", 1, seed=5, min_ops=12, max_ops=12)[0].prompt


@pytest.fixture(scope="session")
def claude(live_server: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=live_server.base_url, api_key="unused", max_retries=0, timeout=120
    )


def _expected(ids: list[int], tok: Any) -> tuple[str, str, int]:
    """(reasoning, answer, reasoning tokens) of a completion's token ids, computed here."""
    end = tok.convert_tokens_to_ids("</think>")
    cut = ids.index(end) if end in ids else len(ids)
    reasoning = tok.decode(ids[:cut], skip_special_tokens=True)
    return reasoning, tok.decode(ids[cut + 1 :], skip_special_tokens=True), cut


def _prompt_len(tok: Any, messages: list[dict[str, str]]) -> int:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tok.encode(text, add_special_tokens=False))


# --- /v1/responses with openai


def test_responses_create_splits_reasoning_and_usage_is_exact(
    openai_client: Any, served_model: str, hf_tokenizer: Any
) -> None:
    raw = openai_client.responses.with_raw_response.create(
        model=served_model,
        input=EASY,
        instructions="Answer in a box.",
        max_output_tokens=120,
        extra_body={"return_token_ids": True, "seed": 3},
    )
    assert raw.headers["X-Budget-Applied"] == "none"
    r = raw.parse()
    assert r.object == "response" and r.id.startswith("resp_")
    reasoning_item, message = r.output
    assert reasoning_item.type == "reasoning" and message.type == "message"
    ids = message.model_extra["thinkgate"]["token_ids"]
    reasoning, answer, n_reasoning = _expected(ids, hf_tokenizer)
    assert reasoning_item.content[0].text == reasoning
    assert r.output_text == answer
    assert r.status == ("completed" if message.status == "completed" else "incomplete")
    messages = [
        {"role": "system", "content": "Answer in a box."},
        {"role": "user", "content": EASY},
    ]
    assert r.usage.input_tokens == _prompt_len(hf_tokenizer, messages)
    assert r.usage.output_tokens == len(ids)
    assert r.usage.output_tokens_details.reasoning_tokens == n_reasoning
    assert r.usage.total_tokens == r.usage.input_tokens + len(ids)
    assert r.model_extra["thinkgate"]["strategy"] == "plain"
    # The SDK's output items go back as the next turn's history (stateless multi-turn).
    turn = [{"role": "user", "content": EASY}, *r.output, {"role": "user", "content": EASY}]
    again = openai_client.responses.create(model=served_model, input=turn, max_output_tokens=60)
    assert again.usage.input_tokens > r.usage.input_tokens


def test_responses_stream_events_equal_the_created_answer(
    openai_client: Any, served_model: str
) -> None:
    args: dict[str, Any] = dict(
        model=served_model, input=[{"role": "user", "content": EASY}], max_output_tokens=200
    )
    whole = openai_client.responses.create(**args, extra_body={"seed": 7})
    assert whole.status == "completed", whole
    with openai_client.responses.stream(**args, extra_body={"seed": 7}) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_text.delta")
    assert final.output_text == whole.output_text
    assert final.output[0].content[0].text == whole.output[0].content[0].text
    assert final.usage.model_dump() == whole.usage.model_dump()


def test_responses_effort_is_a_thinking_budget_held(openai_client: Any, served_model: str) -> None:
    raw = openai_client.responses.with_raw_response.create(
        model=served_model, input=HARD, reasoning={"effort": "minimal"}, max_output_tokens=200
    )
    # minimal: 16 thinking tokens, one sample's worth of tokens (16 + 16 + 2).
    assert raw.headers["X-Budget-Applied"] == "thinking=16;tokens=34"
    r = raw.parse()
    assert r.model_extra["thinkgate"]["strategy"] == "auto"
    assert r.usage.output_tokens <= 34
    assert r.usage.output_tokens_details.reasoning_tokens <= 16
    assert "\\boxed{" in r.output_text


@pytest.mark.parametrize("strategy", ["self-consistency", "deepconf"])
def test_responses_multi_sample_strategies(
    openai_client: Any, served_model: str, strategy: str
) -> None:
    headers = {"X-Strategy": strategy, "X-Budget-Samples": "4"}
    args: dict[str, Any] = dict(model=served_model, input=EASY, max_output_tokens=120)
    raw = openai_client.responses.with_raw_response.create(
        **args, extra_headers=headers, extra_body={"seed": 1}
    )
    r = raw.parse()
    tg = r.model_extra["thinkgate"]
    assert tg["strategy"] == strategy and 1 <= tg["samples"] <= 4
    assert r.output_text and r.output[-1].type == "message"
    if strategy == "self-consistency":  # every sample's tokens, summed
        assert r.usage.output_tokens == sum(tg["sample_tokens"])
        assert r.usage.output_tokens_details.reasoning_tokens == sum(tg["sample_reasoning_tokens"])
    with openai_client.responses.stream(
        **args, extra_headers=headers, extra_body={"seed": 1}
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.output_text == r.output_text
    assert final.usage.model_dump() == r.usage.model_dump()


# --- /v1/messages with anthropic


def test_messages_thinking_budget_held_with_an_answer(
    claude: anthropic.Anthropic, served_model: str, hf_tokenizer: Any
) -> None:
    raw = claude.messages.with_raw_response.create(
        model=served_model,
        max_tokens=200,
        system="Answer in a box.",
        messages=[{"role": "user", "content": HARD}],
        thinking={"type": "enabled", "budget_tokens": 24},
        extra_body={"return_token_ids": True},
    )
    assert raw.headers["X-Budget-Applied"] == "thinking=24"
    m = raw.parse()
    assert [b.type for b in m.content] in (["thinking", "text"], ["text"])
    answer = m.content[-1]
    assert "\\boxed{" in answer.text
    assert m.stop_reason == "end_turn"
    ids = answer.model_extra["thinkgate"]["token_ids"]
    reasoning, text, n_reasoning = _expected(ids, hf_tokenizer)
    assert answer.text == text
    assert m.usage.output_tokens == len(ids)
    assert m.usage.output_tokens_details.thinking_tokens == n_reasoning <= 24
    messages = [
        {"role": "system", "content": "Answer in a box."},
        {"role": "user", "content": HARD},
    ]
    assert m.usage.input_tokens == _prompt_len(hf_tokenizer, messages)
    assert m.model_extra["thinkgate"]["strategy"] == "elastic"


def test_messages_stream_equals_the_created_message(
    claude: anthropic.Anthropic, served_model: str
) -> None:
    args: dict[str, Any] = dict(
        model=served_model,
        max_tokens=200,
        messages=[{"role": "user", "content": EASY}],
        extra_body={"seed": 9},
    )
    whole = claude.messages.create(**args)
    with claude.messages.stream(**args) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "thinking" in kinds and "text" in kinds  # the SDK's thinking / text events
    # The answer's thinkgate details ride on content_block_stop, which the SDK does not keep;
    # a signature seals with a fresh nonce each time, so two seals of one thought differ.
    drop = {"thinkgate", "signature"}
    streamed = [b.model_dump(exclude=drop) for b in final.content]
    assert streamed == [b.model_dump(exclude=drop) for b in whole.content]
    assert all(b.signature for b in [*final.content, *whole.content] if b.type == "thinking")
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens


@pytest.mark.parametrize("strategy", ["self-consistency", "deepconf"])
def test_messages_multi_sample_strategies(
    claude: anthropic.Anthropic, served_model: str, strategy: str
) -> None:
    args: dict[str, Any] = dict(
        model=served_model,
        max_tokens=120,
        messages=[{"role": "user", "content": EASY}],
        extra_headers={"X-Strategy": strategy, "X-Budget-Samples": "4"},
        extra_body={"seed": 2},
    )
    m = claude.messages.create(**args)
    tg = m.model_extra["thinkgate"]
    assert tg["strategy"] == strategy and 1 <= tg["samples"] <= 4
    if strategy == "self-consistency":
        assert m.usage.output_tokens == sum(tg["sample_tokens"])
    with claude.messages.stream(**args) as stream:
        final = stream.get_final_message()
    assert final.content[-1].text == m.content[-1].text
    assert final.usage.output_tokens == m.usage.output_tokens


# --- a client that leaves aborts its engine requests, as on chat

ABORTED = 'thinkgate_aborted_requests_total{reason="client_disconnect"}'


def _aborted_since(live_server: Any, before: float) -> None:
    deadline = time.monotonic() + 30
    while True:
        m = live_server.metrics()
        idle = m["thinkgate_engine_unfinished_requests"] == 0
        if m.get(ABORTED, 0) > before and idle and m["thinkgate_inflight_requests"] == 0:
            return
        assert time.monotonic() < deadline, f"not aborted: {m.get(ABORTED)}"
        time.sleep(0.2)


def test_leaving_a_messages_stream_aborts(
    live_server: Any, claude: anthropic.Anthropic, served_model: str
) -> None:
    before = live_server.metrics().get(ABORTED, 0.0)
    with claude.messages.stream(
        model=served_model,
        max_tokens=400,
        messages=[{"role": "user", "content": LONGEST}],
    ) as stream:
        for event in stream:
            assert event.type == "message_start"  # sent with the first token
            break
    _aborted_since(live_server, before)


def test_leaving_a_responses_request_aborts(live_server: Any, served_model: str) -> None:
    before = live_server.metrics().get(ABORTED, 0.0)
    body = {"model": served_model, "input": HARD, "max_output_tokens": 400}
    headers = {"X-Strategy": "self-consistency", "X-Budget-Samples": "32"}
    live_server.post_and_leave("/v1/responses", body, headers)
    _aborted_since(live_server, before)


# --- the clients' 2026 knobs, on the real engine


@pytest.mark.local_only  # the gateway's seal and counts: one engine shows them
def test_encrypted_reasoning_carries_the_thinking_into_turn_two(
    openai_client: Any, served_model: str
) -> None:
    include = ["reasoning.encrypted_content"]
    first = openai_client.responses.create(
        model=served_model, input=EASY, store=False, include=include, max_output_tokens=120
    )
    reasoning = next(i for i in first.output if i.type == "reasoning")
    thought = reasoning.content[0].text
    assert reasoning.encrypted_content and thought
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": first.output_text}],
    }
    sealed = {"type": "reasoning", "summary": [], "encrypted_content": reasoning.encrypted_content}
    plain = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": thought}],
    }
    user = {"role": "user", "content": EASY}

    def count(items: list[Any]) -> int:
        return int(
            openai_client.responses.input_tokens.count(model=served_model, input=items).input_tokens
        )

    # The sealed item renders as the same prompt as the thinking given in the clear, so
    # the reasoning the model sees in turn 2 is turn 1's.
    assert count([user, sealed, answer, user]) == count([user, plain, answer, user])
    assert count([user, sealed, answer, user]) > count([user, answer, user])
    again = openai_client.responses.create(
        model=served_model,
        input=[user, sealed, answer, user],
        store=False,
        include=include,
        max_output_tokens=120,
    )
    assert again.usage.input_tokens == count([user, sealed, answer, user])


@pytest.mark.local_only  # the gateway's seal and counts: one engine shows them
def test_messages_signatures_effort_and_counts_on_the_live_server(
    claude: anthropic.Anthropic, served_model: str
) -> None:
    messages = [{"role": "user", "content": EASY}]
    counted = claude.messages.count_tokens(model=served_model, messages=messages)
    first = claude.messages.create(
        model=served_model,
        max_tokens=200,
        messages=messages,
        thinking={"type": "enabled", "budget_tokens": 64, "display": "omitted"},
    )
    assert first.usage.input_tokens == counted.input_tokens
    block = first.content[0]
    assert block.type == "thinking" and block.thinking == "" and block.signature
    # Anthropic's effort knob is an auto plan.
    planned = claude.messages.create(
        model=served_model,
        max_tokens=200,
        messages=messages,
        thinking={"type": "adaptive"},
        output_config={"effort": "high"},
    )
    assert planned.model_extra["thinkgate"]["strategy"] == "auto"  # type: ignore[index]
    turn = [
        b.model_dump(exclude_none=True, exclude={"thinkgate", "citations"}) for b in first.content
    ]
    follow = [*messages, {"role": "assistant", "content": turn}, {"role": "user", "content": EASY}]
    longer = claude.messages.count_tokens(model=served_model, messages=follow)
    cleared = claude.beta.messages.count_tokens(
        model=served_model,
        messages=follow,  # type: ignore[arg-type]
        context_management={
            "edits": [
                {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}}
            ]
        },
    )
    # The signature's thinking is in the prompt; the clearing edit takes it out.
    assert longer.input_tokens > cleared.input_tokens
    again = claude.messages.create(model=served_model, max_tokens=200, messages=follow)
    assert again.usage.input_tokens == longer.input_tokens
    tampered = [{**turn[0], "signature": turn[0]["signature"][:-6] + "AAAAAA"}, *turn[1:]]
    bad = [*messages, {"role": "assistant", "content": tampered}, {"role": "user", "content": EASY}]
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=served_model, max_tokens=200, messages=bad)
    assert claude.models.retrieve(served_model).id == served_model
