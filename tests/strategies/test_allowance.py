"""The request's total-token ceiling and deadline (``core.allowance``), over the real app
with a scripted engine that honours the elastic processor's arguments as the real one
does (thinking budget, thinking minimum, thinking deadline, solution budget, max_tokens).

The property: for every strategy that needs no reward model, every ceiling and both
response modes, ``usage.completion_tokens`` never passes the ceiling and the answer is
there. The live engine's side (the processor ending thinking at the instant, the 400s
over HTTP) is tested in ``tests/server/test_budget_limits_live.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from core.allowance import Allowance, BudgetSpent, DecodeSpeed, Limits
from core.engine import GenerateRequest, Sample, SamplingConfig
from kernels.elastic import args as ea
from server.pipeline.call_fit import fit_call

QUESTION = [{"role": "user", "content": "Compute 3+4 mod 10."}]
THOUGHT = "3+4=7\n3+4=7 check\n" * 12  # a long thought: budgets have something to cut
ANSWER = "\\boxed{7}"
STEP_S = 0.002  # the scripted engine's decode step (the controllable clock of these tests)


def elastic_model(tokens: Any) -> Any:
    """Per sample: THOUGHT, cut where the elastic arguments say (budget, minimum, the
    thinking deadline at the scripted decode speed), ``</think>``, ANSWER and EOS, the
    answer cut by the solution budget, everything cut by ``max_tokens``."""
    thought = tuple(tokens.encode(THOUGHT))
    answer = (*tokens.encode(ANSWER), tokens.eos_token_ids[0])

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        s = request.sampling
        extra = s.extra_args
        t = extra.get(ea.THINKING_BUDGET)
        think = thought if not isinstance(t, int) else thought[:t]
        deadline = extra.get(ea.THINK_DEADLINE)
        if isinstance(deadline, float):
            steps = max(0, int((deadline - time.time()) / STEP_S))
            think = think[:steps]
        ids = (*think, tokens.think_end_id)
        sol = extra.get(ea.SOLUTION_BUDGET)
        ids += answer if not isinstance(sol, int) else answer[:sol]
        cap = s.max_tokens if s.max_tokens is not None else len(ids)
        finish = "stop" if len(ids) <= cap else "length"
        return [Sample(index=i, token_ids=ids[:cap], finish_reason=finish) for i in range(s.n)]

    return handler


def _body(model: str, strategy: str, budget: dict[str, int], *, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "messages": QUESTION,
        "strategy": strategy,
        "budget": budget,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }


def _read(r: Any, stream: bool) -> tuple[str, int, dict[str, Any]]:
    """(answer text, completion tokens, thinkgate object) of a JSON or SSE response."""
    assert r.status_code == 200, r.text
    if not stream:
        body = r.json()
        return (
            body["choices"][0]["message"]["content"],
            body["usage"]["completion_tokens"],
            body["thinkgate"],
        )
    frames = [
        orjson.loads(line[6:])
        for line in r.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    content = "".join(c["delta"].get("content") or "" for f in frames for c in f.get("choices", ()))
    usage = next(f["usage"] for f in reversed(frames) if f.get("usage"))
    info = next((f["thinkgate"] for f in reversed(frames) if f.get("thinkgate")), {})
    return content, usage["completion_tokens"], info


STRATEGIES = [
    ("plain", {}),
    ("elastic", {"thinking": 200}),
    ("self-consistency", {"samples": 8}),
    ("self-consistency", {"samples": 8, "thinking": 64}),
    ("pets", {"samples": 16}),
    ("auto", {}),
]


@pytest.mark.parametrize("ceiling", [19, 40, 100, 300, 1000])
@pytest.mark.parametrize(("strategy", "budget"), STRATEGIES)
@pytest.mark.parametrize("stream", [False, True])
async def test_usage_never_passes_the_ceiling_and_an_answer_comes(
    scripted_app: Any,
    testbed_tokens: Any,
    strategy: str,
    budget: dict[str, int],
    ceiling: int,
    stream: bool,
) -> None:
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        body = _body(app.model, strategy, {**budget, "tokens": ceiling}, stream=stream)
        r = await app.client.post("/v1/chat/completions", json=body)
        content, used, info = _read(r, stream)
        assert used <= ceiling, (used, info)
        assert ANSWER in content, (content, info)
        assert info["allowance"]["tokens"] == ceiling
        calls = app.engine.calls
        reserved = sum(c.sampling.n * (c.sampling.max_tokens or 0) for c in calls)
        assert reserved <= ceiling  # the worst case of every call, not just what came


async def test_a_ceiling_that_binds_lowers_the_thinking_not_the_answer(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        body = _body(app.model, "self-consistency", {"samples": 4, "tokens": 200}, stream=False)
        r = await app.client.post("/v1/chat/completions", json=body)
        content, used, info = _read(r, False)
        (call,) = app.engine.calls
        assert call.sampling.n == 4 and call.sampling.max_tokens == 50
        # 50 tokens a sample: the answer's reserve (16), </think> and the thinking.
        assert call.sampling.extra_args[ea.THINKING_BUDGET] == 50 - 1 - 16
        assert info["allowance"]["clamped_calls"] == 1 and used <= 200


async def test_fewer_samples_when_the_ceiling_holds_fewer_answers(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        body = _body(app.model, "self-consistency", {"samples": 8, "tokens": 60}, stream=False)
        r = await app.client.post("/v1/chat/completions", json=body)
        _, used, info = _read(r, False)
        (call,) = app.engine.calls
        assert call.sampling.n == 3  # 60 // (16 + 1 + 1 + 1): an answer's room each
        assert used <= 60 and info["samples"] == 3


async def test_the_deadline_ends_thinking_and_the_answer_comes_in_time(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        app.engine._step_s = STEP_S
        t0 = time.perf_counter()
        body = _body(app.model, "plain", {"deadline_ms": 250}, stream=False)
        r = await app.client.post("/v1/chat/completions", json=body)
        elapsed = time.perf_counter() - t0
        content, _, info = _read(r, False)
        (call,) = app.engine.calls
        assert isinstance(call.sampling.extra_args[ea.THINK_DEADLINE], float)
        assert ANSWER in content
        assert elapsed < 0.25 * 1.1, elapsed
        assert info["allowance"]["stopped_by"] is None


async def test_a_call_past_the_deadline_is_cut_in_the_gateway(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    # An engine without the processor cannot end thinking: the gateway ends the call.
    async with scripted_app(elastic_model(testbed_tokens)) as app:
        app.engine._step_s = 0.01
        t0 = time.perf_counter()
        body = _body(app.model, "plain", {"deadline_ms": 200}, stream=True)
        r = await app.client.post("/v1/chat/completions", json=body)
        elapsed = time.perf_counter() - t0
        assert r.status_code == 200
        assert elapsed < 0.2 * 1.1, elapsed
        assert '"finish_reason":"length"' in r.text.replace(" ", "")


@pytest.mark.parametrize(
    ("budget", "param", "message"),
    [
        ({"tokens": 0}, "budget.tokens", "positive"),
        (
            {"tokens": 5},
            "budget.tokens",
            "least that leaves room for an answer on this server is 18",
        ),
        ({"tokens": "300"}, "budget.tokens", "integer"),
        ({"deadline_ms": -1}, "budget.deadline_ms", "positive"),
        ({"deadline_ms": 1.5}, "budget.deadline_ms", "integer"),
        ({"thinking_min": 50, "thinking": 20}, "budget.thinking_min", "cannot exceed"),
        ({"thinking_min": -2}, "budget.thinking_min", "non-negative"),
    ],
)
async def test_bad_limits_are_400s_naming_the_field(
    scripted_app: Any, testbed_tokens: Any, budget: dict[str, Any], param: str, message: str
) -> None:
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        body = {"model": app.model, "messages": QUESTION, "budget": budget}
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == param and message in error["message"], error
        assert not app.engine.calls


async def test_headers_set_the_limits_and_show_in_budget_applied(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        headers = {"X-Budget-Tokens": "120", "X-Budget-Deadline-Ms": "5000"}
        body = {"model": app.model, "messages": QUESTION}
        r = await app.client.post("/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        applied = r.headers["X-Budget-Applied"]
        assert "tokens=120" in applied and "deadline_ms=5000" in applied
        info = r.json()["thinkgate"]
        # The testbed's shipped table is attached in front of its model.
        assert info["strategy"] == "auto" and info["auto"]["source"] == "table"
        assert isinstance(info["auto"]["expected_accuracy"], float)
        assert r.json()["usage"]["completion_tokens"] <= 120
        r = await app.client.post(
            "/v1/chat/completions", json=body, headers={"X-Budget-Tokens": "lots"}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "X-Budget-Tokens"


async def test_a_thinking_minimum_travels_to_the_processor(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        body = {"model": app.model, "messages": QUESTION, "budget": {"thinking_min": 30}}
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["thinkgate"]["strategy"] == "elastic"
        (call,) = app.engine.calls
        assert call.sampling.extra_args[ea.THINKING_MIN] == 30
    async with scripted_app(elastic_model(testbed_tokens)) as app:  # no processor
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "budget.thinking_min"


# --- fit_call, the one place a call meets its request's limits


def _call(
    n: int = 1,
    max_tokens: int | None = None,
    *,
    thinking_only: bool = False,
    prompt: tuple[int, ...] = (1, 2, 3),
) -> Any:
    return GenerateRequest(
        request_id="r",
        prompt_token_ids=prompt,
        sampling=SamplingConfig(n=n, max_tokens=max_tokens),
        thinking_only=thinking_only,
    )


def _fit(call: Any, allowance: Allowance, tokens: Any, processors: frozenset[str]) -> Any:
    return fit_call(
        call,
        allowance,
        tokens=tokens,
        max_model_len=512,
        processors=processors,
        answer_reserve=16,
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_thinking_only_calls_keep_an_answer_back_per_row(testbed_tokens: Any) -> None:
    allowance = Allowance(limits=Limits(tokens=100, answer=20))
    fit = _fit(_call(4, thinking_only=True), allowance, testbed_tokens, frozenset({"elastic"}))
    # Four rows, each keeping its answer's 20: (100 - 80) // 4 tokens of thinking each.
    assert fit.request.sampling.max_tokens == 5 and fit.reserved == 20
    assert ea.THINKING_BUDGET not in fit.request.sampling.extra_args
    allowance.reserve(fit.reserved)
    with pytest.raises(BudgetSpent) as spent:
        _fit(_call(4, thinking_only=True), allowance, testbed_tokens, frozenset())
    assert spent.value.reason == "tokens"
    # An answer after closed thinking gets the answer's room, not all that is left.
    closed = (1, 2, testbed_tokens.think_end_id)
    fit = _fit(_call(1, prompt=closed), allowance, testbed_tokens, frozenset())
    assert fit.request.sampling.max_tokens == 20


def test_a_batch_shares_what_is_left_over_its_rows(testbed_tokens: Any) -> None:
    allowance = Allowance(limits=Limits(tokens=200, answer=20))
    first = _fit_rows(_call(2, thinking_only=True), allowance, testbed_tokens, rows=4)
    assert first.request.sampling.max_tokens == (200 - 40) // 4


def _fit_rows(call: Any, allowance: Allowance, tokens: Any, *, rows: int) -> Any:
    return fit_call(
        call,
        allowance,
        tokens=tokens,
        max_model_len=512,
        processors=frozenset(),
        answer_reserve=16,
        rows=rows,
    )


def test_the_deadline_sets_the_thinking_instant_and_the_cut(testbed_tokens: Any) -> None:
    clock = _Clock()
    speed = DecodeSpeed(seconds_per_token=0.01, measured=1)
    limits = Limits(deadline=101.0, wall_deadline=5000.0, answer=20, margin_s=0.05)
    allowance = Allowance(limits=limits, speed=speed, clock=clock)
    fit = _fit(_call(2), allowance, testbed_tokens, frozenset({"elastic"}))
    answer_s = 1.5 * 20 * 0.01 + 0.02
    assert fit.cut_at == pytest.approx(101.0 - 0.05)
    extra = fit.request.sampling.extra_args
    assert extra[ea.THINK_DEADLINE] == pytest.approx(5000.0 - 0.05 - answer_s, abs=1e-3)
    step = _fit(_call(2, thinking_only=True), allowance, testbed_tokens, frozenset({"elastic"}))
    assert step.cut_at == pytest.approx(101.0 - 0.05 - answer_s)
    clock.now = 101.0 - 0.05 - answer_s  # no time left for a step and an answer
    with pytest.raises(BudgetSpent) as spent:
        _fit(_call(1, thinking_only=True), allowance, testbed_tokens, frozenset())
    assert spent.value.reason == "deadline"
    assert allowance.short(1) == "deadline"


def test_the_decode_speed_follows_what_it_measures() -> None:
    speed = DecodeSpeed()
    speed.observe(1.0, 100)
    assert speed.seconds_per_token == pytest.approx(0.01)
    speed.observe(0.5, 100)
    assert speed.seconds_per_token == pytest.approx(0.01 + 0.2 * (0.005 - 0.01))
    speed.observe(5.0, 2)  # too few tokens to say anything
    assert speed.measured == 2


async def test_without_a_table_auto_plans_by_its_rule(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    model = elastic_model(testbed_tokens)
    async with scripted_app(model, processors=frozenset({"elastic"}), auto_table="none") as app:
        body = {"model": app.model, "messages": QUESTION, "budget": {"tokens": 400}}
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        chosen = r.json()["thinkgate"]["auto"]
        assert chosen["source"] == "rule" and chosen["expected_accuracy"] is None
        assert chosen["strategy"] == "self-consistency" and chosen["samples"] == 4


async def test_a_far_deadline_sends_calls_whole_and_a_near_one_streams(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    # 512 tokens at the default 10 ms, x 3 + 0.5 s: 15.9 s. A 60 s deadline cannot bind
    # a call, which goes whole (no stream to pay for); a 250 ms one is streamed, so that
    # the gateway can cut it token by token.
    async with scripted_app(
        elastic_model(testbed_tokens), processors=frozenset({"elastic"})
    ) as app:
        for deadline_ms, whole in ((60_000, True), (250, False)):
            app.engine.batches.clear()
            body = _body(app.model, "plain", {"deadline_ms": deadline_ms}, stream=False)
            content, _, _ = _read(await app.client.post("/v1/chat/completions", json=body), False)
            assert ANSWER in content
            assert bool(app.engine.batches) is whole, deadline_ms


async def test_the_cut_ends_a_stalled_call_and_spares_a_cancellation_of_its_own() -> None:
    import asyncio

    from server.pipeline.request_engine import _Cut

    async def stalled() -> Any:
        await asyncio.sleep(10)
        yield None

    cut = _Cut(0.05)
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        await cut.wait(stalled())
    assert time.perf_counter() - t0 < 0.5
    with pytest.raises(TimeoutError):  # once due, every later wait is cut at once
        await cut.wait(stalled())
    cut.close()
    # A task cancelled from outside is cancelled, not cut.
    far = _Cut(60.0)
    task = asyncio.ensure_future(far.wait(stalled()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    far.close()
