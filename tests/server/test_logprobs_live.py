"""The client's logprobs from the real engine, both engines, through the OpenAI SDK: chat
``logprobs``/``top_logprobs`` (plain, streamed, a sampling strategy's chosen sample) and
completions ``echo`` with ``logprobs`` as lm-evaluation-harness asks for them, equal to
what vLLM's own server answers for the same prompt."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from testbed.task import make_questions
from testbed.tokenizer import CharCodec

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

QUESTION = make_questions("test", 1, seed=7, min_ops=2, max_ops=3)[0].prompt
MESSAGES = [{"role": "user", "content": QUESTION}]


def test_greedy_chat_logprobs_are_the_best_of_their_alternatives(
    openai_client: Any, served_model: str
) -> None:
    r = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens  # thinking included, as vLLM's server
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        best = max(t.logprob for t in entry.top_logprobs)
        assert entry.logprob == pytest.approx(best, abs=1e-5)  # greedy: the top token
        assert entry.top_logprobs[0].token == entry.token
    text = "".join(e.token for e in content)
    assert r.choices[0].message.content in text


def test_streamed_chat_logprobs_cover_every_token_once(
    openai_client: Any, served_model: str
) -> None:
    stream = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
    )
    values: list[float] = []
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for c in chunk.choices:
            if c.logprobs is not None and c.logprobs.content:
                values += [t.logprob for t in c.logprobs.content]
    assert usage is not None and len(values) == usage.completion_tokens
    again = openai_client.chat.completions.create(
        model=served_model, messages=MESSAGES, max_tokens=24, temperature=0, logprobs=True
    )
    assert values == pytest.approx([t.logprob for t in again.choices[0].logprobs.content], abs=1e-4)


@pytest.mark.parametrize("strategy", ["self-consistency", "deepconf"])
def test_a_voting_strategy_returns_its_chosen_samples_logprobs(
    openai_client: Any, served_model: str, strategy: str
) -> None:
    r = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        temperature=1,
        seed=3,
        logprobs=True,
        extra_headers={"X-Strategy": strategy, "X-Budget-Samples": "4"},
    )
    info = r.model_extra["thinkgate"]
    chosen = r.choices[0].model_extra["thinkgate"]["sample_index"]
    content = r.choices[0].logprobs.content
    assert len(content) == info["sample_tokens"][chosen]
    assert all(e.logprob <= 0 for e in content)


def _loglikelihood(client: Any, model: str, prompt: list[int]) -> tuple[list[float], list[bool]]:
    """lm-evaluation-harness's ``local-completions`` log-likelihood request and reading:
    ``token_logprobs[1:-1]`` (the prompt after its first token) and whether each is the
    best of its ``top_logprobs`` (``is_greedy``)."""
    r = client.completions.create(
        model=model, prompt=prompt, echo=True, logprobs=1, max_tokens=1, temperature=0, seed=1
    )
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == len(prompt) + 1 and lp.token_logprobs[0] is None
    values = lp.token_logprobs[1:-1]
    greedy = [
        v >= max(top.values()) - 1e-6 for v, top in zip(values, lp.top_logprobs[1:-1], strict=True)
    ]
    return values, greedy


def test_echo_logprobs_match_vllms_own_server(
    openai_client: Any, served_model: str, remote_stack: Any
) -> None:
    """The prompt's logprobs through thinkgate (this engine) against a replica's own
    vLLM server (``/v1/completions``), same ids: what makes lm-eval's log-likelihood
    accuracy the same through either."""
    import openai

    replica = remote_stack.replicas[0].url
    upstream = httpx.get(f"{replica}/v1/models", timeout=10).json()["data"][0]["id"]
    vllm_client = openai.OpenAI(base_url=f"{replica}/v1", api_key="x", max_retries=0)
    text = QUESTION + " 3+8=1"
    ids = CharCodec().encode(text)
    echoed = openai_client.completions.create(
        model=served_model, prompt=text, echo=True, logprobs=0, max_tokens=1
    ).choices[0]
    assert echoed.text.startswith(text)
    assert "".join(echoed.logprobs.tokens[: len(ids)]) == text
    ours, ours_greedy = _loglikelihood(openai_client, served_model, ids)
    theirs, theirs_greedy = _loglikelihood(vllm_client, upstream, ids)
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert ours_greedy == theirs_greedy
