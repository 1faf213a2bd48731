"""Budget guidance end to end: the openai SDK against the live server (real vLLM engine,
testbed ``base`` loaded as the budget-guidance wrapper because it ships
``bg_predictor/``; the guidance and elastic processors are server defaults).
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from core.base import StrategyRequest
from core.budget import Budget
from core.engine import SamplingConfig
from core.errors import BackendUnavailable
from strategies.thinking.budget_guidance import BudgetGuidance
from testbed.task import make_questions

HARD = make_questions("test", 6, seed=21, min_ops=8, max_ops=12)
EASY = make_questions("test", 3, seed=22, min_ops=1, max_ops=3)
BOXED = re.compile(r"\\boxed\{[^{}]+\}")

# Live tests run against both engines (unit tests here take no server).
pytestmark = pytest.mark.engines("local", "remote")


def chat(client: Any, prompt: str, headers: dict[str, str], **kw: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="testbed-base",
        messages=[{"role": "user", "content": prompt}],
        extra_headers={"X-Strategy": "budget-guidance", **headers},
        **kw,
    )


@pytest.mark.vllm
@pytest.mark.slow
def test_no_budget_decodes_exactly_like_plain(openai_client: Any) -> None:
    """B unset or 0: the processor is loaded but guides nothing (bit-identical greedy)."""
    for q in EASY + HARD[:2]:
        msgs = [{"role": "user", "content": q.prompt}]
        plain = openai_client.chat.completions.create(
            model="testbed-base", messages=msgs, temperature=0, max_tokens=400
        )
        for headers in ({}, {"X-Budget-Thinking": "0"}):
            r = chat(openai_client, q.prompt, headers, temperature=0, max_tokens=400).parse()
            got, want = r.choices[0].message, plain.choices[0].message
            assert got.content == want.content
            assert got.reasoning_content == want.reasoning_content
            assert r.usage.completion_tokens == plain.usage.completion_tokens
            assert r.model_extra["thinkgate"]["guided"] is False


@pytest.mark.vllm
@pytest.mark.slow
def test_guidance_steers_thinking_toward_the_budget(openai_client: Any) -> None:
    budget = 24
    guided_tokens, free_tokens = [], []
    for q in HARD:
        free = chat(openai_client, q.prompt, {}, temperature=0).parse()
        raw = chat(openai_client, q.prompt, {"X-Budget-Thinking": str(budget)}, temperature=0)
        r = raw.parse()
        assert raw.headers["X-Budget-Applied"] == f"thinking={budget}"
        choice = r.choices[0]
        assert choice.message.content and BOXED.search(choice.message.content)
        tg = r.model_extra["thinkgate"]
        assert tg["strategy"] == "budget-guidance" and tg["guided"] is True
        assert tg["thinking_budget"] == budget
        reasoning = r.usage.completion_tokens_details.reasoning_tokens
        assert tg["choices"][0]["thinking_tokens"] == reasoning
        assert tg["choices"][0]["within_budget"] == (reasoning <= budget)
        guided_tokens.append(reasoning)
        free_tokens.append(free.usage.completion_tokens_details.reasoning_tokens)
    # Hard questions think ~100+ tokens unguided; guidance must cut that substantially.
    assert sum(guided_tokens) < 0.6 * sum(free_tokens), (guided_tokens, free_tokens)
    assert sum(t <= 2 * budget for t in guided_tokens) >= len(HARD) - 1


@pytest.mark.vllm
@pytest.mark.slow
def test_streaming_single_sample_streams_reasoning_then_content(openai_client: Any) -> None:
    q = HARD[0]
    stream = openai_client.chat.completions.create(
        model="testbed-base",
        messages=[{"role": "user", "content": q.prompt}],
        extra_headers={"X-Strategy": "budget-guidance", "X-Budget-Thinking": "96"},
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    reasoning, content, order, usage = [], [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            r = (c.delta.model_extra or {}).get("reasoning_content") or (
                c.delta.model_extra or {}
            ).get("reasoning")
            if r:
                reasoning.append(r)
                order.append("r")
            if c.delta.content:
                content.append(c.delta.content)
                order.append("c")
    assert len(reasoning) > 1, "reasoning must arrive in several live deltas"
    assert order.index("c") > max(i for i, k in enumerate(order) if k == "r")
    assert BOXED.search("".join(content))
    assert usage is not None and usage.completion_tokens_details.reasoning_tokens > 0
    # The same request without streaming gives the same text (greedy).
    r = chat(openai_client, q.prompt, {"X-Budget-Thinking": "96"}, temperature=0).parse()
    assert "".join(content) == r.choices[0].message.content


@pytest.mark.vllm
@pytest.mark.slow
def test_samples_vote_in_one_engine_request(openai_client: Any) -> None:
    q = HARD[1]
    r = chat(
        openai_client,
        q.prompt,
        {"X-Budget-Thinking": "40", "X-Budget-Samples": "4"},
        temperature=1.0,
        seed=3,
    ).parse()
    assert len(r.choices) == 1
    tg = r.model_extra["thinkgate"]
    assert tg["samples"] == 4 and tg["engine_requests"] == 1 and tg["guided"] is True
    assert sum(c["count"] for c in tg["classes"]) + tg["unanswered"] == 4
    assert r.usage.completion_tokens_details.reasoning_tokens == sum(tg["sample_reasoning_tokens"])
    assert 0 <= tg["within_budget"] <= 4


@pytest.mark.vllm
@pytest.mark.slow
def test_hard_cap_and_solution_budget_compose_with_guidance(openai_client: Any) -> None:
    budget, factor, solution = 16, 1.5, 12
    cap = math.ceil(budget * factor)
    for q in HARD[:3]:
        r = chat(
            openai_client,
            q.prompt,
            {"X-Budget-Thinking": str(budget), "X-Budget-Solution": str(solution)},
            temperature=0,
            extra_body={"hard_cap_factor": factor},
        ).parse()
        tg = r.model_extra["thinkgate"]
        assert tg["hard_cap"] == cap and tg["solution_budget"] == solution
        assert r.usage.completion_tokens_details.reasoning_tokens <= cap
        assert r.usage.completion_tokens <= cap + 1 + solution + 1


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize(
    ("headers", "body", "param"),
    [
        ({"X-Budget-Thinking": "16"}, {"hard_cap_factor": 0.5}, "hard_cap_factor"),
        ({}, {"hard_cap_factor": 2}, "hard_cap_factor"),
        ({"X-Budget-Thinking": "16"}, {"guidance_mask": "yes"}, "guidance_mask"),
        ({"X-Budget-Thinking": "16", "X-Budget-Samples": "3"}, {"n": 2}, "n"),
    ],
)
def test_bad_options_are_400(
    openai_client: Any, headers: dict[str, str], body: dict[str, Any], param: str
) -> None:
    body = dict(body)  # the parametrised dict is shared by every engine's run
    n = body.pop("n", None)
    with pytest.raises(openai.BadRequestError) as err:
        chat(openai_client, EASY[0].prompt, headers, extra_body=body, **({"n": n} if n else {}))
    assert err.value.body["param"] == param  # type: ignore[index]


def test_engine_without_predictor_is_refused_before_any_engine_call() -> None:
    engine: Any = SimpleNamespace(
        processors=frozenset({"elastic"}), model_name="plain-model", max_model_len=512
    )
    request = StrategyRequest(
        request_id="r",
        prompt_token_ids=(1, 2, 3),
        thinking_open=True,
        n=1,
        sampling=SamplingConfig(),
        budget=Budget(thinking=32),
        stream=False,
    )
    with pytest.raises(BackendUnavailable, match="not available") as err:
        BudgetGuidance().validate(request, engine)
    assert err.value.status == 503
