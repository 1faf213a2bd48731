"""Every body field has a place (server/apis/openai/protocol.py): OpenAI platform fields are
accepted and ignored, vLLM's sampling extras reach the engine, a strategy's declared options reach
the strategy (a near miss of one is a 400 naming it). Live server, real engine, the OpenAI
SDK (and the exact payload vLLM's benchmark client sends)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

MESSAGES = [{"role": "user", "content": make_questions("test", 1, seed=5)[0].prompt}]


def _text(r: Any) -> str:
    m = r.choices[0].message
    return f"{m.model_extra.get('reasoning_content') or ''}|{m.content}"


def _error(exc: openai.BadRequestError) -> dict[str, Any]:
    assert isinstance(exc.body, dict)
    return exc.body


def test_openai_platform_fields_are_accepted_and_ignored(
    openai_client: Any, served_model: str
) -> None:
    plain = openai_client.chat.completions.create(
        model=served_model, messages=MESSAGES, max_tokens=24, temperature=0
    )
    r = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,
        store=False,
        metadata={"team": "evals"},
        service_tier="auto",
        extra_body={"prompt_cache_key": "k1", "safety_identifier": "user-1"},
    )
    assert _text(r) == _text(plain)


def test_top_k_and_min_p_reach_the_engine(openai_client: Any, served_model: str) -> None:
    """top_k = 1 and min_p = 1 keep only the likeliest token: at temperature 1, any seed
    gives the greedy answer (without them two seeds differ on this question)."""
    model = served_model

    def ask(seed: int, **extra: Any) -> str:
        r = openai_client.chat.completions.create(
            model=model,
            messages=MESSAGES,
            max_tokens=48,
            temperature=1.0,
            seed=seed,
            extra_body=extra,
        )
        return _text(r)

    greedy = _text(
        openai_client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=48, temperature=0
        )
    )
    sampled = {ask(seed) for seed in (1, 2, 3, 4)}
    assert len(sampled) > 1, "the test needs a question the sampler varies on"
    assert {ask(seed, top_k=1) for seed in (1, 2, 3)} == {greedy}
    assert {ask(seed, min_p=1.0) for seed in (1, 2)} == {greedy}


def test_min_tokens_and_repetition_penalty_reach_the_engine(
    openai_client: Any, served_model: str
) -> None:
    model = served_model
    base = openai_client.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=200, temperature=0
    )
    assert base.choices[0].finish_reason == "stop"
    floor = base.usage.completion_tokens + 12
    held = openai_client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=200,
        temperature=0,
        extra_body={"min_tokens": floor},
    )
    assert held.usage.completion_tokens >= floor  # EOS held back until then
    penalised = openai_client.chat.completions.create(
        model=model,
        messages=MESSAGES,
        max_tokens=200,
        temperature=0,
        extra_body={"repetition_penalty": 1.8},
    )
    assert _text(penalised) != _text(base)


def test_vllm_benchmark_client_payload_streams(base_url: str, served_model: str) -> None:
    """What ``vllm bench serve`` (openai backend) posts to /v1/completions, verbatim."""
    payload = {
        "model": served_model,
        "prompt": "1+2",
        "repetition_penalty": 1.0,
        "max_tokens": 8,
        "logprobs": None,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    with httpx.stream("POST", f"{base_url}/v1/completions", json=payload, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert '"completion_tokens":8' in lines[-2].replace(" ", "")


def test_guidellm_payload_streams(base_url: str, served_model: str) -> None:
    """What GuideLLM posts on every streamed chat request, vLLM's continuous_usage_stats
    among them: every chunk carries the usage so far, growing to the final count."""
    payload = {
        "model": served_model,
        "messages": [{"role": "user", "content": "1+2"}],
        "max_tokens": 6,
        "stop": None,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=payload, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert '"completion_tokens":6' in lines[-2].replace(" ", "")
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert all(c["usage"]["prompt_tokens"] == chunks[-1]["usage"]["prompt_tokens"] for c in chunks)
    assert counts == sorted(counts) and counts[-1] == 6
    assert counts[0] >= 1 and len(set(counts)) >= 2  # counted live, not only at the end


def test_logit_bias_and_penalties_reach_the_engine(
    openai_client: Any, served_model: str, hf_tokenizer: Any
) -> None:
    """A character of the greedy answer banned by ``logit_bias`` never appears, under
    ``plain`` and in self-consistency's chosen sample; ``presence_penalty`` changes the
    greedy text; an id past the vocabulary and a penalty under a step search are 400s."""
    model = served_model

    def ask(headers: dict[str, str] | None = None, **extra: Any) -> Any:
        return openai_client.chat.completions.create(
            model=model,
            messages=MESSAGES,
            max_tokens=64,
            temperature=1.0 if headers else 0,
            extra_headers=headers or {},
            extra_body=extra,
        )

    greedy = _text(ask())
    digit = next(ch for ch in greedy if ch.isdigit())
    (token,) = hf_tokenizer.encode(digit, add_special_tokens=False)
    banned = {str(token): -100}
    assert digit not in _text(ask(logit_bias=banned))
    voted = ask({"X-Strategy": "self-consistency", "X-Budget-Samples": "3"}, logit_bias=banned)
    assert digit not in _text(voted)
    assert _text(ask(presence_penalty=2.0)) != greedy
    with pytest.raises(openai.BadRequestError) as past:
        ask(logit_bias={str(hf_tokenizer.vocab_size + 1000): 5})
    assert _error(past.value)["param"] == "logit_bias"
    with pytest.raises(openai.BadRequestError) as search:
        ask({"X-Strategy": "beam-search", "X-Budget-Samples": "2"}, frequency_penalty=0.5)
    assert _error(search.value)["param"] == "frequency_penalty"
