"""A real outside model, end to end: SmolLM2-135M-Instruct (Llama architecture, a
49,152-token BPE vocabulary, its own chat template) served with ``--no-reasoning``,
through the OpenAI SDK.

The testbed's default resources were made for another tokenizer: the reward model and
the PETS table are left out at start-up (the log says why), ``best-of-n`` then scores
with ``logprob``, and a request that names the ``reward`` scorer gets a 503 naming the
flag that provides one. Every strategy that applies to a non-reasoning model runs here;
token counts are checked against the model's own tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import LiveServer, _log_dir, launch_server, stop_server, wait_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTION = "What is 2+3? Put the final answer in \\boxed{}."


# ``thinkgate serve --model <outside model>`` with these flags: launched beside
# test_outside_reasoning.py's gateway, the two loading together (tests/conftest.py).
OUTSIDE_GATEWAY_FLAGS = ("--no-reasoning", "--max-model-len", "1024")


@pytest.fixture(scope="module")
def smol(outside_gateway: Any) -> Any:
    return outside_gateway


@pytest.fixture(scope="module")
def client(smol: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer(outside_model: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(outside_model))


def chat(question: str = QUESTION) -> Any:
    return [{"role": "user", "content": question}]


def info(choice: Any) -> dict[str, Any]:
    extra = choice.model_extra.get("thinkgate")
    assert isinstance(extra, dict), choice
    return extra


def test_the_log_says_why_the_testbed_resources_were_left_out(smol: Any) -> None:
    log = smol.log_path.read_text(errors="replace")
    assert "scoring.reward.other_tokenizer" in log
    assert "pets.table.other_model" in log


def test_plain_chat_counts_tokens_with_the_real_tokenizer(
    client: openai.OpenAI, smol: Any, tokenizer: Any
) -> None:
    r = client.chat.completions.create(
        model=smol.model,
        messages=chat(),
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    prompt_ids = tokenizer.apply_chat_template(chat(), add_generation_prompt=True, tokenize=True)
    if not isinstance(prompt_ids, list):  # transformers 5 answers a BatchEncoding
        prompt_ids = prompt_ids["input_ids"]
    assert r.usage is not None
    assert r.usage.prompt_tokens == len(prompt_ids)
    assert r.usage.completion_tokens == 12 and r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content  # BPE text, decoded by the gateway
    assert r.usage.completion_tokens_details is not None
    assert r.usage.completion_tokens_details.reasoning_tokens == 0


def test_streaming_matches_the_json_answer(client: openai.OpenAI, smol: Any) -> None:
    args: dict[str, Any] = {"model": smol.model, "messages": chat(), "max_tokens": 24}
    whole = client.chat.completions.create(**args, temperature=0)
    stream = client.chat.completions.create(
        **args, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    parts, usage = [], None
    for chunk in stream:
        for c in chunk.choices:
            parts.append(c.delta.content or "")
        usage = chunk.usage or usage
    assert "".join(parts) == whole.choices[0].message.content
    assert usage is not None and whole.usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_n_choices_and_their_usage(client: openai.OpenAI, smol: Any) -> None:
    r = client.chat.completions.create(
        model=smol.model,
        messages=chat(),
        n=3,
        max_tokens=10,
        seed=7,
        extra_body={"ignore_eos": True},
    )
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage is not None and r.usage.completion_tokens == 30


def test_completions_prompt_tokens_are_the_tokenizers(
    client: openai.OpenAI, smol: Any, tokenizer: Any
) -> None:
    prompt = "The capital of France is"
    r = client.completions.create(
        model=smol.model,
        prompt=prompt,
        max_tokens=8,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert r.usage is not None
    assert r.usage.prompt_tokens == len(tokenizer.encode(prompt, add_special_tokens=False))
    assert r.usage.completion_tokens == 8
    assert r.choices[0].text


@pytest.mark.parametrize(
    ("strategy", "body"),
    [
        ("self-consistency", {}),
        ("best-of-majority", {"scorer": "logprob"}),
        ("best-of-n", {}),  # the default scorer: reward left out, so logprob
    ],
)
def test_sampling_strategies_run_on_the_outside_model(
    client: openai.OpenAI, smol: Any, strategy: str, body: dict[str, Any]
) -> None:
    r = client.chat.completions.create(
        model=smol.model,
        messages=chat(),
        max_tokens=48,
        extra_headers={"X-Strategy": strategy, "X-Budget-Samples": "4"},
        extra_body=body,
    )
    tg = r.model_extra["thinkgate"] if r.model_extra else {}
    assert tg["strategy"] == strategy and tg["samples"] == 4
    # \boxed{} answers parsed out of real BPE text; usage is the samples' sum.
    assert any(a is not None for a in tg["sample_answers"]), tg
    assert r.usage is not None and r.usage.completion_tokens == sum(tg["sample_tokens"])
    assert info(r.choices[0])["answer"] is not None or tg["unanswered"] == 4
    if strategy != "self-consistency":
        assert tg["scorer"] == "logprob", tg


def test_pets_samples_adaptively_without_the_testbed_table(
    client: openai.OpenAI, smol: Any
) -> None:
    r = client.chat.completions.create(
        model=smol.model,
        messages=chat(),
        max_tokens=32,
        extra_headers={"X-Strategy": "pets", "X-Budget-Samples": "6"},
    )
    assert r.choices[0].message.content is not None


def test_the_reward_scorer_is_a_503_naming_the_flag(client: openai.OpenAI, smol: Any) -> None:
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(
            model=smol.model,
            messages=chat(),
            max_tokens=16,
            extra_headers={"X-Strategy": "best-of-n", "X-Budget-Samples": "2"},
            extra_body={"scorer": "reward"},
        )
    assert err.value.status_code == 503
    error: Any = err.value.body or {}
    assert error["code"] == "resource_unavailable" and error["param"] == "scorer"
    assert "--reward-model" in error["message"] and "--reward-url" in error["message"]


@pytest.mark.parametrize(
    ("args", "param"),
    [
        ({"max_tokens": 5000}, "max_tokens"),  # beyond the 1,024-token context
        ({"messages": []}, "messages"),
        ({"model": "gpt-4o"}, "model"),
        ({"n": 0}, "n"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(
    client: openai.OpenAI, smol: Any, args: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(**{"model": smol.model, "messages": chat(), **args})
    assert err.value.status_code in (400, 404), err.value
    error: Any = err.value.body or {}
    assert param in (error.get("param") or ""), error


REFUSING_TEST = "test_a_named_reward_model_with_another_tokenizer_refuses_to_start"


@pytest.fixture(scope="module", autouse=True)
def refusing_server(
    request: pytest.FixtureRequest, outside_model: Path
) -> Iterator[LiveServer | None]:
    """The server of the refusal test, launched when the module starts (if that test is
    selected): its start, mostly one core's imports, overlaps the module's gateways'."""
    wanted = any(
        item.module is request.module and item.originalname == REFUSING_TEST
        for item in request.session.items
        if isinstance(item, pytest.Function)
    )
    if not wanted:
        yield None
        return
    import testbed

    reward = testbed.model_path("reward")
    flags = ("--model", str(outside_model), "--no-reasoning", "--reward-model", str(reward))
    server = launch_server(_log_dir() / "outside-refusing.log", flags)
    try:
        yield server
    finally:
        stop_server(server)


def test_a_named_reward_model_with_another_tokenizer_refuses_to_start(
    refusing_server: LiveServer | None, outside_model: Path
) -> None:
    import testbed

    assert refusing_server is not None
    reward = testbed.model_path("reward")
    with pytest.raises(pytest.fail.Exception) as failed:
        wait_server(refusing_server)  # --reward-model: the testbed's, another tokenizer
    said = str(failed.value)
    assert "does not share the served model's tokenizer" in said
    assert str(reward) in said and str(outside_model) in said
