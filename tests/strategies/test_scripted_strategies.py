"""Strategy logic over HTTP without vLLM: the real app in process, a scripted engine.

The fast tier (no ``vllm`` marker): each test builds the gateway's own app around a
``ScriptedEngine`` whose handler says what the engine generates, and talks to it over
ASGI. What the user sees of the same behaviour on the real engine is tested end to end
in the live-server modules (``test_elastic_api.py``, ``test_sampling_api.py``...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from core.engine import Engine, GenerateRequest, Sample
from core.errors import BackendUnavailable, InvalidRequest
from engines.scripted import samples_of

QUESTION = [{"role": "user", "content": "Compute 3+4 mod 10."}]
THOUGHT = "3+4=7\n"  # what the scripted model thinks (cut by the budget: no </think>)
ANSWER = "\\boxed{7}"


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": QUESTION, **extra}


def _sse(text: str) -> list[Any]:
    """The JSON frames of a stream (an error frame ends it without ``[DONE]``)."""
    frames = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    return [orjson.loads(f) for f in frames if f != "[DONE]"]


def _two_pass_model(tokens: Any, *, answer_fails: bool = False) -> Any:
    """Think calls (``stop_token_ids`` holds ``</think>``) return THOUGHT cut by their
    ``max_tokens``; answer calls return ANSWER and EOS, or fail as a dead engine does."""

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        if tokens.think_end_id in request.sampling.stop_token_ids:
            ids = tuple(tokens.encode(THOUGHT))[: request.sampling.max_tokens]
            return [
                Sample(index=i, token_ids=ids, finish_reason="length")
                for i in range(request.sampling.n)
            ]
        if answer_fails:
            raise BackendUnavailable("the engine is dead; the server must be restarted")
        return samples_of(tokens, ANSWER)

    return handler


async def test_elastic_two_pass_thinks_within_t_then_answers_within_s(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    tokens = testbed_tokens
    async with scripted_app(_two_pass_model(tokens)) as app:  # no elastic processor
        budget = {"thinking": 4, "solution": 16}
        r = await app.client.post("/v1/chat/completions", json=_chat(app.model, budget=budget, n=2))
        assert r.status_code == 200, r.text
        body = r.json()
        think, *answers = app.engine.calls
        # Thinking: t tokens at most, stopped at </think>, all n samples in one request.
        assert think.sampling.max_tokens == 4 and think.sampling.n == 2
        assert think.sampling.stop_token_ids == (tokens.think_end_id,)
        thought = tuple(tokens.encode(THOUGHT))[:4]
        # Each answer call continues its own thought, closed by </think>, within s.
        assert len(answers) == 2
        for call in answers:
            assert call.prompt_token_ids == (*think.prompt_token_ids, *thought, tokens.think_end_id)
            assert call.sampling.max_tokens == 16 and call.sampling.n == 1
        for choice in body["choices"]:
            assert choice["message"]["reasoning_content"] == tokens.decode(thought)
            assert choice["message"]["content"] == ANSWER
            assert choice["finish_reason"] == "stop"
        answer_ids = len(tokens.encode(ANSWER)) + 1  # and EOS
        usage = body["usage"]
        assert usage["completion_tokens"] == 2 * (len(thought) + 1 + answer_ids)
        assert usage["completion_tokens_details"]["reasoning_tokens"] == 2 * len(thought)
        assert body["thinkgate"]["mode"] == "two-pass"


async def test_an_engine_error_inside_the_two_pass_fallback_keeps_its_status(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    # The answer calls run in a TaskGroup: their error used to leave as an ExceptionGroup,
    # which the error handler does not map (a 500 "unexpected" for an engine's 503).
    async with scripted_app(_two_pass_model(testbed_tokens, answer_fails=True)) as app:
        body = _chat(app.model, budget={"thinking": 4, "solution": 8})
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "engine_unavailable"
        # Streamed: the thinking went out first, then the same error as a frame.
        r = await app.client.post("/v1/chat/completions", json={**body, "stream": True})
        assert r.status_code == 200
        frames = _sse(r.text)
        assert frames[-1]["error"]["code"] == "engine_unavailable", frames[-1]


async def test_self_consistency_votes_over_the_scripted_pool(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    tokens = testbed_tokens
    pool = ["7\n</think>\\boxed{7}", "7\n</think>\\boxed{7}", "5\n</think>\\boxed{5}"]

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        assert request.sampling.n == 3  # one engine request for the whole pool
        return samples_of(tokens, *pool)

    async with scripted_app(handler) as app:
        r = await app.client.post(
            "/v1/chat/completions",
            json=_chat(app.model, strategy="self-consistency", budget={"samples": 3}),
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["choices"][0]["message"]["content"] == "\\boxed{7}"
        assert len(app.engine.calls) == 1
        generated = sum(len(tokens.encode(t)) + 1 for t in pool)
        assert body["usage"]["completion_tokens"] == generated
        assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 3 * 2


async def test_an_engine_that_under_delivers_samples_is_a_500_that_says_so(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(testbed_tokens, *["7\n</think>\\boxed{7}"] * (request.sampling.n - 1))

    async with scripted_app(handler) as app:
        for stream in (False, True):
            r = await app.client.post(
                "/v1/chat/completions",
                json=_chat(
                    app.model, strategy="self-consistency", budget={"samples": 4}, stream=stream
                ),
            )
            error = r.json()["error"] if not stream else _sse(r.text)[-1]["error"]
            assert error["code"] == "engine_error", error
            assert "finished 3 of 4 samples" in error["message"]


async def test_plain_n_choices_and_exact_usage(scripted_app: Any, testbed_tokens: Any) -> None:
    tokens = testbed_tokens
    texts = ["1+1=2\n</think>\\boxed{2}", "2\n</think>\\boxed{2}"]

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *texts[: request.sampling.n])

    async with scripted_app(handler) as app:
        engine: object = app.engine
        assert isinstance(engine, Engine)  # the protocol the server types it by
        r = await app.client.post("/v1/chat/completions", json=_chat(app.model, n=2))
        assert r.status_code == 200, r.text
        body = r.json()
        assert [c["message"]["content"] for c in body["choices"]] == ["\\boxed{2}"] * 2
        assert [c["message"]["reasoning_content"] for c in body["choices"]] == ["1+1=2\n", "2\n"]
        assert body["usage"]["prompt_tokens"] == len(app.engine.calls[0].prompt_token_ids)
        assert body["usage"]["completion_tokens"] == sum(len(tokens.encode(t)) + 1 for t in texts)


async def test_engine_errors_map_to_their_status(scripted_app: Any, testbed_tokens: Any) -> None:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        raise InvalidRequest("stop strings must not be empty", param="stop")

    async with scripted_app(handler) as app:
        r = await app.client.post("/v1/chat/completions", json=_chat(app.model))
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "stop"
        app.engine.dead = True
        assert (await app.client.get("/ready")).status_code == 503
        r = await app.client.post("/v1/chat/completions", json=_chat(app.model))
        assert r.status_code == 503, r.text


async def test_metrics_label_routes_by_template_never_by_raw_path(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    # Found by the long fuzz: each random batch id and 404 path became a series of its
    # own, and one with odd bytes broke the benchmark's /metrics reader.
    async with scripted_app(lambda request: samples_of(testbed_tokens, "1")) as app:
        weird = "%C2%A7%20z%0A"
        assert (await app.client.get(f"/v1/pets/batches/{weird}")).status_code == 404
        assert (await app.client.get(f"/nope/{weird}")).status_code == 404
        r = await app.client.post("/v1/chat/completions", json=_chat(app.model))
        assert r.status_code == 200
        text = (await app.client.get("/metrics")).text
        routes = {
            line.split('route="', 1)[1].split('"', 1)[0]
            for line in text.splitlines()
            if line.startswith("thinkgate_requests_total{")
        }
        assert routes == {"/v1/pets/batches/{batch_id}", "unmatched", "/v1/chat/completions"}
