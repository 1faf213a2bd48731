"""Every answer validates against the SDKs' own types of it, strictly: each field their
schema requires is present (null where nothing applies). The SDKs themselves do not mind
a missing field (they build responses without validating); strict validators and
conformance suites do. Scripted engine, the fast tier."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of

ANSWER = "3+4=7\n</think>\\boxed{7}"
MSG = [{"role": "user", "content": "Compute 3+4 mod 10."}]
TOOL = {"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}}


def _handler(tokens: Any) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *[ANSWER] * request.sampling.n)

    return handler


async def test_answers_validate_against_the_sdks_types(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    from anthropic.types import Message
    from openai.types.chat import ChatCompletion
    from openai.types.completion import Completion
    from openai.types.responses import Response

    async with scripted_app(_handler(testbed_tokens)) as app:
        m = app.model
        chat = await app.client.post("/v1/chat/completions", json={"model": m, "messages": MSG})
        completion = await app.client.post(
            "/v1/completions", json={"model": m, "prompt": "3+4=", "max_tokens": 8}
        )
        responses = await app.client.post(
            "/v1/responses",
            json={"model": m, "input": "Compute 3+4 mod 10.", "tools": [TOOL], "max_tool_calls": 2},
        )
        messages = await app.client.post(
            "/v1/messages", json={"model": m, "max_tokens": 64, "messages": MSG}
        )
    for r in (chat, completion, responses, messages):
        assert r.status_code == 200, r.text
    assert ChatCompletion.model_validate(chat.json(), strict=True)
    assert chat.json()["choices"][0]["message"]["refusal"] is None
    assert Completion.model_validate(completion.json())
    response = Response.model_validate(responses.json())
    body = responses.json()
    assert body["temperature"] == 1.0 and body["top_p"] == 1.0 and body["max_tool_calls"] == 2
    for name in ("presence_penalty", "frequency_penalty", "top_logprobs", "service_tier"):
        assert body[name] is not None, name
    for name in ("safety_identifier", "prompt_cache_key"):
        assert name in body and body[name] is None, name
    assert body["tools"][0]["strict"] is None and response.tools
    reasoning = next(i for i in body["output"] if i["type"] == "reasoning")
    assert "encrypted_content" not in reasoning  # only when sealed (include asks for it)
    message = Message.model_validate(messages.json())
    usage = messages.json()["usage"]
    assert usage["cache_creation"] == {
        "ephemeral_5m_input_tokens": 0,
        "ephemeral_1h_input_tokens": 0,
    }
    assert usage["server_tool_use"] is None and usage["service_tier"] == "standard"
    assert message.content[-1].type == "text"


async def test_stream_events_validate_against_the_sdks_types(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """Every event of a Responses stream (the reasoning summary's included) and of a
    Messages stream is one of the SDK's event types, with the fields it requires."""
    import json

    from anthropic.types import RawMessageStreamEvent
    from openai.types.responses import ResponseStreamEvent
    from pydantic import TypeAdapter

    def events(text: str) -> list[dict[str, Any]]:
        out = []
        for frame in text.split("\n\n"):
            data = [line[6:] for line in frame.splitlines() if line.startswith("data: ")]
            if data and data[0] != "[DONE]":
                out.append(json.loads(data[0]))
        return out

    async with scripted_app(_handler(testbed_tokens)) as app:
        m = app.model
        streamed = await app.client.post(
            "/v1/responses",
            json={
                "model": m,
                "input": "Compute 3+4 mod 10.",
                "stream": True,
                "reasoning": {"summary": "auto"},
            },
        )
        messages = await app.client.post(
            "/v1/messages",
            json={"model": m, "max_tokens": 64, "messages": MSG, "stream": True},
        )
    assert streamed.status_code == 200 and messages.status_code == 200
    openai_events = TypeAdapter(ResponseStreamEvent)
    kinds = set()
    for event in events(streamed.text):
        kinds.add(openai_events.validate_python(event).type)
    assert "response.reasoning_summary_text.delta" in kinds and "response.completed" in kinds
    anthropic_events = TypeAdapter(RawMessageStreamEvent)
    for event in events(messages.text):
        anthropic_events.validate_python(event)


async def test_answers_validate_against_the_specs_a_third_party_suite_bundles(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """llm-comply's bundled specs (OpenAI chat, Open Responses, Anthropic), strict JSON
    Schema: the fast tier's view of what its live run checks."""
    from pathlib import Path

    import llm_comply
    from llm_comply.schema import SpecLoader

    specs = Path(llm_comply.__file__).parent / "specs"
    async with scripted_app(_handler(testbed_tokens)) as app:
        m = app.model
        chat = await app.client.post("/v1/chat/completions", json={"model": m, "messages": MSG})
        responses = await app.client.post(
            "/v1/responses", json={"model": m, "input": "Compute 3+4 mod 10.", "tools": [TOOL]}
        )
        messages = await app.client.post(
            "/v1/messages", json={"model": m, "max_tokens": 64, "messages": MSG}
        )
    cases = [
        ("openai_chat.json", chat, "CreateChatCompletionResponse"),
        ("openresponses.json", responses, "ResponseResource"),
        ("anthropic.json", messages, "Message"),
    ]
    for spec, answer, schema in cases:
        assert answer.status_code == 200, answer.text
        assert SpecLoader(str(specs / spec)).validate(answer.json(), schema) == [], spec
