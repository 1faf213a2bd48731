"""End to end: the real OpenAI SDK against the live server on the real vLLM engine."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote", "router")]

QUESTION = make_questions("test", 1, seed=3)[0].prompt
MESSAGES = [{"role": "user", "content": QUESTION}]


def _expected(ids: list[int], tok: Any) -> tuple[str, str, int]:
    """(reasoning, content, reasoning_tokens) computed here from the token ids."""
    end = tok.convert_tokens_to_ids("</think>")
    cut = ids.index(end) if end in ids else len(ids)
    reasoning = tok.decode(ids[:cut], skip_special_tokens=True)
    content = tok.decode(ids[cut + 1 :], skip_special_tokens=True)
    return reasoning, content, cut


def _prompt_len(tok: Any, messages: list[dict[str, str]]) -> int:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return len(tok.encode(text, add_special_tokens=False))


def test_models_health_ready(base_url: str, served_model: str) -> None:
    assert httpx.get(f"{base_url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{base_url}/ready")
    assert ready.status_code == 200 and ready.headers["X-Request-Id"]
    models = httpx.get(f"{base_url}/v1/models").json()
    assert models["data"][0]["id"] == served_model
    assert "plain" in models["data"][0]["strategies"]


def test_chat_splits_reasoning_and_usage_is_exact(
    openai_client: Any, served_model: str, hf_tokenizer: Any
) -> None:
    resp = openai_client.chat.completions.with_raw_response.create(
        model=served_model,
        messages=MESSAGES,
        n=3,
        max_tokens=80,
        seed=11,
        temperature=1.0,
        extra_body={"return_token_ids": True},
    )
    assert resp.headers["X-Budget-Applied"] == "none"
    assert resp.headers["X-Request-Id"]
    completion = resp.parse()
    assert len(completion.choices) == 3
    reasoning_total = completion_total = 0
    for i, choice in enumerate(completion.choices):
        assert choice.index == i
        ids = choice.model_extra["thinkgate"]["token_ids"]
        reasoning, content, n_reasoning = _expected(ids, hf_tokenizer)
        msg = choice.message
        assert (msg.model_extra["reasoning_content"] or "") == reasoning
        assert msg.model_extra["reasoning"] == msg.model_extra["reasoning_content"]
        assert msg.content == content
        assert choice.finish_reason in ("stop", "length")
        if choice.finish_reason == "length":
            assert len(ids) == 80
        reasoning_total += n_reasoning
        completion_total += len(ids)
    usage = completion.usage
    assert usage.prompt_tokens == _prompt_len(hf_tokenizer, MESSAGES)
    assert usage.completion_tokens == completion_total
    assert usage.completion_tokens_details.reasoning_tokens == reasoning_total
    assert usage.total_tokens == usage.prompt_tokens + completion_total
    extra = completion.model_extra["thinkgate"]
    assert extra["strategy"] == "plain" and extra["samples"] == 3
    assert extra["budget"] == {
        "thinking": None,
        "solution": None,
        "samples": None,
        "k": None,
        "tokens": None,
        "deadline_ms": None,
        "thinking_min": None,
    }


def test_stream_matches_the_unstreamed_answer(openai_client: Any, served_model: str) -> None:
    args: dict[str, Any] = dict(
        model=served_model, messages=MESSAGES, n=2, max_tokens=60, seed=5, temperature=1.0
    )
    whole = openai_client.chat.completions.create(**args)
    stream = openai_client.chat.completions.create(
        **args, stream=True, stream_options={"include_usage": True}
    )
    reasoning = {0: "", 1: ""}
    content = {0: "", 1: ""}
    finish: dict[int, str] = {}
    phase = {0: "role", 1: "role"}
    usage = thinkgate = None
    for chunk in stream:
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
            continue
        (choice,) = chunk.choices
        delta, i = choice.delta, choice.index
        if (tg := (chunk.model_extra or {}).get("thinkgate")) is not None:
            thinkgate = tg
        if delta.role:
            assert phase[i] == "role"
            phase[i] = "reasoning"
        r = (delta.model_extra or {}).get("reasoning_content")
        if r:
            assert phase[i] == "reasoning", "reasoning after content"
            assert delta.model_extra["reasoning"] == r
            reasoning[i] += r
        if delta.content:
            phase[i] = "content"
            content[i] += delta.content
        if choice.finish_reason:
            finish[i] = choice.finish_reason
    for c in whole.choices:
        assert reasoning[c.index] == (c.message.model_extra["reasoning_content"] or "")
        assert content[c.index] == c.message.content
        assert finish[c.index] == c.finish_reason
    assert usage is not None and usage.model_dump() == whole.usage.model_dump()
    assert thinkgate is not None and thinkgate["strategy"] == "plain" and thinkgate["samples"] == 2


def test_raw_sse_framing(base_url: str, served_model: str) -> None:
    body = {"model": served_model, "messages": MESSAGES, "max_tokens": 20, "stream": True}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["X-Request-Id"] and r.headers["X-Budget-Applied"] == "none"
        raw = r.read().decode()
    frames = raw.split("\n\n")
    assert frames[-1] == "" and frames[-2] == "data: [DONE]"
    assert all(f.startswith("data: {") for f in frames[:-2])


def test_completions_text_and_token_prompts(
    openai_client: Any, served_model: str, hf_tokenizer: Any
) -> None:
    text = hf_tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = hf_tokenizer.encode(text, add_special_tokens=False)
    by_text = openai_client.completions.create(
        model=served_model,
        prompt=text,
        max_tokens=40,
        seed=2,
        extra_body={"return_token_ids": True},
    )
    by_ids = openai_client.completions.create(model=served_model, prompt=ids, max_tokens=40, seed=2)
    assert by_text.object == "text_completion"
    assert by_text.usage.prompt_tokens == by_ids.usage.prompt_tokens == len(ids)
    assert by_text.choices[0].text == by_ids.choices[0].text
    out_ids = by_text.choices[0].model_extra["thinkgate"]["token_ids"]
    reasoning, content, n_reasoning = _expected(out_ids, hf_tokenizer)
    assert by_text.choices[0].text == content
    assert (by_text.choices[0].model_extra["reasoning_content"] or "") == reasoning
    assert by_text.usage.completion_tokens_details.reasoning_tokens == n_reasoning
    streamed = openai_client.completions.create(
        model=served_model, prompt=ids, max_tokens=40, seed=2, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == by_ids.choices[0].text


def test_completions_take_a_list_of_prompts_answered_in_order(
    openai_client: Any, served_model: str, hf_tokenizer: Any
) -> None:
    """OpenAI's batched prompt (what lm-eval's local-completions sends): strings or
    token-id lists, n choices per prompt, prompt by prompt, usage summed."""
    texts = [
        hf_tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in ("Compute 1+2 mod 10.", "Compute 7*8 mod 10.", "Compute 9-4+3 mod 10.")
    ]
    args: dict[str, Any] = {"model": served_model, "max_tokens": 12, "temperature": 0}
    alone = [openai_client.completions.create(prompt=t, **args) for t in texts]
    batched = openai_client.completions.create(prompt=texts, **args)
    # Greedy: choice i is prompt i's own answer.
    assert [c.text for c in batched.choices] == [a.choices[0].text for a in alone]
    assert [c.index for c in batched.choices] == [0, 1, 2]
    assert batched.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert batched.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone)
    sampled = openai_client.completions.create(
        prompt=texts,
        n=2,
        max_tokens=12,
        seed=3,
        model=served_model,
        extra_body={"ignore_eos": True},
    )
    assert [c.index for c in sampled.choices] == list(range(6))  # n per prompt, in order
    assert sampled.usage.completion_tokens == 6 * 12
    ids = [hf_tokenizer.encode(t, add_special_tokens=False) for t in texts[:2]]
    by_ids = openai_client.completions.create(prompt=ids, **args)
    assert [c.text for c in by_ids.choices] == [a.choices[0].text for a in alone[:2]]
    with pytest.raises(openai.BadRequestError) as err:  # the bad one is named
        openai_client.completions.create(prompt=[texts[0], ""], **args)
    error: Any = err.value.body
    assert error["param"] == "prompt.1"
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.completions.create(prompt=texts, stream=True, **args)
    error = err.value.body
    assert error["param"] == "stream"


def test_budget_headers_are_echoed(openai_client: Any, served_model: str) -> None:
    resp = openai_client.chat.completions.with_raw_response.create(
        model=served_model,
        messages=MESSAGES,
        max_tokens=60,
        extra_headers={"X-Budget-Thinking": "8", "X-Budget-Solution": "6", "X-Request-Id": "abc-1"},
    )
    assert resp.headers["X-Budget-Applied"] == "thinking=8;solution=6"
    assert resp.headers["X-Request-Id"] == "abc-1"
    extra = resp.parse().model_extra["thinkgate"]
    assert extra["strategy"] == "elastic"  # a budget with no strategy named runs elastic
    assert extra["budget"]["thinking"] == 8 and extra["budget"]["solution"] == 6


async def test_async_client_and_sdk_errors(async_openai_client: Any, served_model: str) -> None:
    import openai

    done = await async_openai_client.chat.completions.create(
        model=served_model, messages=MESSAGES, max_tokens=10
    )
    assert done.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError) as info:
        await async_openai_client.chat.completions.create(
            model=served_model, messages=MESSAGES, extra_headers={"X-Strategy": "nope"}
        )
    assert info.value.body["param"] == "X-Strategy"  # type: ignore[index]
    assert info.value.body["code"] == "unknown_strategy"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        await async_openai_client.chat.completions.create(model="gpt-9", messages=MESSAGES)


def test_multi_sample_stream_sends_progress_comments_then_the_answer(
    base_url: str, openai_client: Any, served_model: str
) -> None:
    body = {
        "model": served_model,
        "messages": MESSAGES,
        "max_tokens": 200,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"X-Budget-Samples": "4"}  # no strategy named: samples > 1 runs self-consistency
    url = f"{base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as r:
        assert r.status_code == 200 and r.headers["X-Budget-Applied"] == "samples=4"
        raw = r.read().decode()
    frames = [f for f in raw.split("\n\n") if f]
    progress = [f for f in frames if f.startswith(": thinkgate.progress ")]
    assert progress, "no progress comment"
    assert frames.index(progress[-1]) < min(
        i for i, f in enumerate(frames) if f.startswith("data: {")
    ), "progress comes before the answer"
    # The SDK skips the comments and reads the replayed answer.
    stream = openai_client.chat.completions.create(
        model=served_model,
        messages=MESSAGES,
        max_tokens=200,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    )
    thinkgate, usage, text = None, None, ""
    for chunk in stream:
        thinkgate = (chunk.model_extra or {}).get("thinkgate") or thinkgate
        usage = chunk.usage or usage
        for c in chunk.choices:
            text += c.delta.content or ""
    assert thinkgate is not None
    assert thinkgate["strategy"] == "self-consistency" and thinkgate["samples"] == 4
    assert usage is not None and usage.completion_tokens >= 4  # summed over all 4 samples


def _frames_timed(base_url: str) -> float:
    for line in httpx.get(f"{base_url}/metrics").text.splitlines():
        if line.startswith("thinkgate_stream_frame_wait_seconds_count "):
            return float(line.split()[1])
    raise AssertionError("thinkgate_stream_frame_wait_seconds missing from /metrics")


def test_streamed_frames_are_timed_in_metrics(
    openai_client: Any, served_model: str, base_url: str
) -> None:
    """An SDK stream leaves its frames' wait in the gateway in /metrics."""
    before = _frames_timed(base_url)
    stream = openai_client.chat.completions.create(
        model=served_model, messages=MESSAGES, max_tokens=16, stream=True
    )
    chunks = sum(1 for _ in stream)
    timed = _frames_timed(base_url) - before
    # Frames queued during a send go out (and are timed) together: at least one send,
    # never more than the chunks the SDK read.
    assert 1 <= timed <= chunks


def test_every_token_gets_a_chunk_even_without_text(
    openai_client: Any, served_model: str, hf_tokenizer: Any
) -> None:
    """A token with no text (EOS here) still gets an empty chunk, as vLLM's server streams
    one per engine output: clients that time tokens by chunks (vLLM's benchmark client,
    GuideLLM) otherwise see one gap twice as long.

    vLLM folds outputs together when their reader falls behind (AsyncLLM's output
    collector merges DELTA outputs; the vLLM server behind the remote gateway does the
    same), so on a busy machine the silent token can arrive inside its neighbour's
    output. The stream is drawn again (the same seed, the same tokens) until one shows
    it; a gateway that dropped empty outputs would fail every try."""
    text = hf_tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    for _ in range(8):
        stream = openai_client.completions.create(
            model=served_model,
            prompt=text + "3\n</think>",  # thinking done: the answer, then EOS
            max_tokens=24,
            seed=2,
            stream=True,
            extra_body={"return_token_ids": True, "ignore_eos": True},
        )
        chunks = [c.choices[0] for c in stream if c.choices]
        *live, end = chunks
        ids = end.model_extra["thinkgate"]["token_ids"]
        silent = [t for t in ids if hf_tokenizer.decode([t], skip_special_tokens=True) == ""]
        assert silent, f"no token without text to test with: {hf_tokenizer.decode(ids)!r}"
        assert all(c.finish_reason is None for c in live)
        assert len(live) <= len(ids)  # one chunk per engine output, never more than its tokens
        empty = [
            c for c in live if c.text == "" and not (c.model_extra or {}).get("reasoning_content")
        ]
        if empty:
            return
    raise AssertionError(f"8 streams, none with an empty chunk: {[c.text for c in live]}")
