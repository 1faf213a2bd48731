"""The client's logprobs (chat ``logprobs``/``top_logprobs``, completions ``logprobs`` and
``echo``) through the OpenAI SDK against the app of ``thinkgate serve`` over ASGI, with a
scripted engine that hands out known logprobs: what reaches the engine, what the client
reads back (non-streamed and streamed), and the chosen sample's under a sampling
strategy. The real engines' logprobs are checked live (``test_logprobs_live.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from core.engine import GenerateRequest, Sample, TokenLogprob
from engines.scripted import samples_of

MESSAGES = [{"role": "user", "content": "Compute 3+8 mod 10."}]


def _logprob(i: int, sample: int) -> float:
    """A distinct, known logprob per position and sample."""
    return -0.01 * (i + 1) - sample


def with_logprobs(tokens: Any, request: GenerateRequest, *texts: str) -> list[Sample]:
    """``samples_of(texts)`` with logprobs as the request asks: the token's own, then
    ``k`` alternatives (the token itself first, then ids 5, 6, ...)."""
    k = request.sampling.token_logprobs
    out = []
    for s in samples_of(tokens, *texts):
        lps = None
        if k is not None:
            lps = tuple(
                TokenLogprob(
                    t,
                    _logprob(i, s.index),
                    tuple([(t, _logprob(i, s.index)), *((5 + j, -5.0 - j) for j in range(k))][:k]),
                )
                for i, t in enumerate(s.token_ids)
            )
        prompt = None
        if request.sampling.prompt_logprobs is not None:
            ids = request.prompt_token_ids
            prompt = (None, *(TokenLogprob(t, -1.5, ((t, -1.5),)) for t in ids[1:]))
        # DeepConf's token confidences, when asked: all alike (every trace votes).
        confs = tuple(1.0 for _ in s.token_ids) if request.sampling.top_logprobs else None
        out.append(replace(s, logprobs=lps, prompt_logprobs=prompt, confidences=confs))
    return out


async def test_chat_logprobs_of_every_generated_token_and_their_alternatives(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    text = "<think>\n3+8=1\n</think>\n\\boxed{1}"
    async with scripted_app(lambda r: with_logprobs(testbed_tokens, r, text)) as app:
        r = await app.openai().chat.completions.create(
            model=app.model, messages=MESSAGES, logprobs=True, top_logprobs=2
        )
        (call,) = app.engine.calls
    assert call.sampling.token_logprobs == 2 and call.sampling.prompt_logprobs is None
    content = r.choices[0].logprobs.content  # type: ignore[union-attr]
    ids = samples_of(testbed_tokens, text)[0].token_ids
    assert len(content) == len(ids)  # thinking, answer and EOS: as vLLM's server
    assert [c.logprob for c in content] == pytest.approx([_logprob(i, 0) for i in range(len(ids))])
    assert "".join(c.token for c in content[1:-1]) == text.removeprefix("<think>")
    first = content[1]
    assert [t.logprob for t in first.top_logprobs] == pytest.approx([_logprob(1, 0), -5.0])
    assert first.top_logprobs[0].token == first.token and first.bytes == list(b"\n")


async def test_chat_logprobs_streamed_come_with_their_tokens(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    text = "<think>\n3+8=1\n</think>\n\\boxed{1}"
    async with scripted_app(lambda r: with_logprobs(testbed_tokens, r, text)) as app:
        stream = await app.openai().chat.completions.create(
            model=app.model, messages=MESSAGES, logprobs=True, stream=True
        )
        got: list[float] = []
        async for chunk in stream:
            for c in chunk.choices:
                if c.logprobs is not None and c.logprobs.content:
                    got += [t.logprob for t in c.logprobs.content]
                    assert all(t.top_logprobs == [] for t in c.logprobs.content)
    n = len(samples_of(testbed_tokens, text)[0].token_ids)
    assert got == pytest.approx([_logprob(i, 0) for i in range(n)])


async def test_no_logprobs_unless_asked(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(lambda r: with_logprobs(testbed_tokens, r, "\\boxed{1}")) as app:
        r = await app.openai().chat.completions.create(model=app.model, messages=MESSAGES)
        (call,) = app.engine.calls
    assert call.sampling.token_logprobs is None and r.choices[0].logprobs is None


async def test_completions_echo_with_logprobs_reads_the_prompt_like_lm_eval(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """lm-evaluation-harness's log-likelihood request: token ids, echo, logprobs=1,
    max_tokens=1, temperature 0; it sums ``token_logprobs[ctxlen:-1]`` and checks each
    against the best of its ``top_logprobs``."""
    prompt = testbed_tokens.encode("3+8=1 then 1-5=6")
    async with scripted_app(lambda r: with_logprobs(testbed_tokens, r, "7")) as app:
        r = await app.openai().completions.create(
            model=app.model, prompt=prompt, echo=True, logprobs=1, max_tokens=1, temperature=0
        )
        (call,) = app.engine.calls
    assert call.sampling.prompt_logprobs == 1 and call.sampling.token_logprobs == 1
    choice = r.choices[0]
    lp = choice.logprobs
    assert lp is not None and lp.token_logprobs is not None and lp.top_logprobs is not None
    assert choice.text.startswith("3+8=1 then 1-5=6")
    generated = len(samples_of(testbed_tokens, "7")[0].token_ids)
    assert len(lp.token_logprobs) == len(prompt) + generated
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1 : len(prompt)] == pytest.approx([-1.5] * (len(prompt) - 1))
    for value, top in zip(lp.token_logprobs[1 : len(prompt)], lp.top_logprobs[1:], strict=False):
        assert value == max(top.values())  # lm-eval's is_greedy
    assert lp.text_offset is not None and lp.text_offset[:3] == [0, 1, 2]


async def test_completions_echo_without_logprobs_prepends_the_prompt_text(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(lambda r: with_logprobs(testbed_tokens, r, "7", "7")) as app:
        r = await app.openai().completions.create(
            model=app.model,
            prompt=["ab", "cd"],
            echo=True,
            max_tokens=4,
            extra_body={"strategy": "self-consistency", "budget": {"samples": 2}},
        )
        calls = app.engine.calls
    assert [c.text for c in r.choices] == ["ab7", "cd7"]
    assert all(c.sampling.prompt_logprobs is None for c in calls)


@pytest.mark.parametrize(
    ("strategy", "extra"),
    [("self-consistency", {}), ("pets", {"cap": 3}), ("deepconf", {"warmup": 3})],
)
async def test_a_voting_strategy_returns_the_chosen_samples_logprobs(
    scripted_app: Callable[..., Any], testbed_tokens: Any, strategy: str, extra: dict[str, Any]
) -> None:
    # The majority: sample 1 represents it.
    texts = ("</think>\\boxed{2}", "</think>\\boxed{1}", "</think>\\boxed{1}")
    processors = frozenset({"confidence"})  # deepconf's early stop (its warm-up is all here)
    async with scripted_app(
        lambda r: with_logprobs(testbed_tokens, r, *texts), processors=processors
    ) as app:
        r = await app.openai().chat.completions.create(
            model=app.model,
            messages=MESSAGES,
            logprobs=True,
            top_logprobs=1,
            extra_headers={"X-Strategy": strategy, "X-Budget-Samples": "3"},
            extra_body=extra,
        )
        (call,) = app.engine.calls
    assert call.sampling.token_logprobs == 1
    assert r.choices[0].message.content == "\\boxed{1}"  # the majority's answer
    content = r.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [c.logprob for c in content] == pytest.approx(
        [_logprob(i, 1) for i in range(len(content))]
    )
    assert len(content) == len(samples_of(testbed_tokens, texts[1])[0].token_ids)


async def test_self_consistency_streamed_replays_the_chosen_samples_logprobs(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    texts = ("</think>\\boxed{1}", "</think>\\boxed{2}", "</think>\\boxed{2}")
    async with scripted_app(lambda r: with_logprobs(testbed_tokens, r, *texts)) as app:
        stream = await app.openai().completions.create(
            model=app.model,
            prompt="Compute 3+8 mod 10.",
            logprobs=0,
            stream=True,
            extra_body={"strategy": "self-consistency", "budget": {"samples": 3}},
        )
        values: list[float | None] = []
        offsets: list[int] = []
        async for chunk in stream:
            for c in chunk.choices:
                if c.logprobs is not None and c.logprobs.token_logprobs:
                    values += c.logprobs.token_logprobs
                    offsets += c.logprobs.text_offset or []
    n = len(samples_of(testbed_tokens, texts[1])[0].token_ids)
    assert values == pytest.approx([_logprob(i, 1) for i in range(n)])
    assert offsets == sorted(offsets) and offsets[0] == 0


async def test_deepconf_returns_an_online_traces_logprobs(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    # Warm-up of two that disagree, then online traces of one each that agree: the
    # answer is the online class, represented by the first online trace (call 1).
    calls: list[GenerateRequest] = []

    def handler(request: GenerateRequest) -> list[Sample]:
        calls.append(request)
        texts = (
            ("</think>\\boxed{2}", "</think>\\boxed{3}")
            if len(calls) == 1
            else ("</think>\\boxed{1}",)
        )
        out = []
        for s in with_logprobs(testbed_tokens, request, *texts):
            assert s.logprobs is not None
            shifted = tuple(
                replace(t, logprob=t.logprob - 10 * (len(calls) - 1)) for t in s.logprobs
            )
            out.append(replace(s, logprobs=shifted))
        return out

    async with scripted_app(handler, processors=frozenset({"confidence"})) as app:
        r = await app.openai().chat.completions.create(
            model=app.model,
            messages=MESSAGES,
            logprobs=True,
            extra_headers={"X-Strategy": "deepconf", "X-Budget-Samples": "4"},
            extra_body={"warmup": 2, "round_size": 1},
        )
    assert len(calls) == 3 and all(c.sampling.token_logprobs == 0 for c in calls)
    assert r.choices[0].message.content == "\\boxed{1}"
    content = r.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [c.logprob for c in content] == pytest.approx(
        [_logprob(i, 0) - 10 for i in range(len(content))]
    )
