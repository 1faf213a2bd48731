"""Beam search, particle filtering and DVTS end to end: the openai SDK against the live
server (the real vLLM engine on the testbed ``base`` model, the testbed PRM served by vLLM
as a step-pooling model), local and remote engines.

The ``thinkgate`` object reports what the search did (steps, candidates and survivors
per step, tokens per step, the chosen path's PRM rewards), so the tests audit usage and
the search's shape from outside.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

import testbed
from strategies.answers import equivalent
from testbed.task import Question, make_questions

HAS_PRM = (testbed.model_path("prm") / "config.json").exists()
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.engines("local", "remote"),
    pytest.mark.skipif(not HAS_PRM, reason="testbed PRM not trained yet"),
]

EASY = make_questions("test", 3, seed=31, min_ops=3, max_ops=5)
OWN_CONF = {"confidence": 1.0}
ABORTED = 'thinkgate_aborted_requests_total{reason="client_disconnect"}'
UNFINISHED = "thinkgate_engine_unfinished_requests"
INFLIGHT = "thinkgate_inflight_requests"


def ask(client: Any, q: Question, strategy: str, samples: int, **kw: Any) -> tuple[Any, Any]:
    headers = {"X-Strategy": strategy, "X-Budget-Samples": str(samples)}
    headers.update(kw.pop("headers", {}))
    raw = client.chat.completions.with_raw_response.create(
        model="testbed-base",
        messages=[{"role": "user", "content": q.prompt}],
        extra_headers=headers,
        temperature=1.0,
        **kw,
    )
    return raw.parse(), raw.headers


def audit(r: Any, tg: dict[str, Any]) -> None:
    """Usage is every generated token: each step's candidates, pruned ones included,
    and the answers; the search's shape is self-consistent."""
    steps = tg["steps"]
    assert len(tg["candidates_per_step"]) == len(tg["tokens_per_step"]) == steps >= 1
    assert r.usage.completion_tokens == sum(tg["tokens_per_step"]) + tg["answer_tokens"]
    assert 0 < r.usage.completion_tokens_details.reasoning_tokens < r.usage.completion_tokens
    assert tg["prm_calls"] >= 1 and tg["prm_tokens"] > 0
    rewards = tg["chosen_step_rewards"]
    assert rewards and all(0.0 <= x <= 1.0 for x in rewards)
    choice = r.choices[0]
    assert choice.model_extra["thinkgate"]["steps"] == len(rewards)
    # Steps are thinking lines: one reward per line of the returned reasoning, and one for
    # the end of its thinking (closed by the model or by the gateway). Thinking that ends
    # mid-line is either the model closing right after a line with no newline between
    # (seen at T=1: that line and the close are one step, scored once) or a step cut at
    # its token cap and closed by the gateway (scored apart).
    reasoning = choice.message.model_extra["reasoning_content"] or ""
    lines = len([ln for ln in reasoning.split("\n") if ln])
    if not reasoning or reasoning.endswith("\n"):
        assert lines + 1 == len(rewards), (reasoning, rewards)
    else:
        assert len(rewards) in (lines, lines + 1), (reasoning, rewards)


@pytest.mark.parametrize(
    "strategy", ["beam-search", "particle-filtering", "dvts", "step-rejection"]
)
def test_search_answers_with_audited_usage(openai_client: Any, strategy: str) -> None:
    right = 0
    for i, q in enumerate(EASY):
        # Particle filtering weighs steps by the generator's confidence too (the engine
        # returns each step's sampled-token logprobs with it), by the latest reward on the
        # first question and by its change (twisted SMC) on the others.
        pf_body = {**OWN_CONF, "weights": "ratio" if i else "latest"}
        # The last question draws each next step while the PRM scores the current one.
        pf_body["speculate"] = i == len(EASY) - 1
        body: dict[str, Any] = {"expansions": 2}
        if strategy == "particle-filtering":
            body = pf_body
        elif strategy == "step-rejection":
            # The last question draws its paths in rounds of 2 until the vote settles.
            body = {"accept": 0.7, "retries": 2}
            if i == len(EASY) - 1:
                body.update(adaptive=True, adaptive_round=2)
        r, headers = ask(openai_client, q, strategy, 4, extra_body=body)
        tg = r.model_extra["thinkgate"]
        assert tg["strategy"] == strategy and tg["samples"] == 4
        audit(r, tg)
        content = r.choices[0].message.content
        assert "\\boxed{" in content
        answer = r.choices[0].model_extra["thinkgate"]["answer"]
        right += answer is not None and equivalent(answer, str(q.answer))
        assert headers["x-budget-applied"] == "samples=4"
        if strategy == "beam-search":
            # 4 beams x 2 candidates each step; one engine round per step.
            assert tg["candidates_per_step"][0] == 8
            assert all(s <= 4 for s in tg["survivors_per_step"])
        elif strategy == "dvts":
            assert tg["subtrees"] == 2 and tg["candidates_per_step"][0] == 4
        elif strategy == "step-rejection":
            # One draw per live path a round; a rejected step is drawn again, never kept
            # unless its path ran out of redraws.
            assert tg["paths"] == 4 and tg["accept"] == 0.7 and tg["retries"] == 2
            drawn = 4
            if "adaptive" in body:
                adaptive = tg["adaptive"]
                drawn = adaptive["paths"]
                assert drawn == 2 * adaptive["rounds"] and adaptive["cap"] == 4
                if drawn < 4:  # only a settled vote stops before the cap
                    assert adaptive["stopped"] == "settled"
                assert r.usage.prompt_tokens % adaptive["rounds"] == 0
            assert tg["candidates_per_step"][0] == min(drawn, 2 if "adaptive" in body else 4)
            assert all(c <= 4 for c in tg["candidates_per_step"])
            assert tg["complete_paths"] + tg["forced_paths"] == drawn
        else:
            assert tg["particles"] == 4 and tg["candidates_per_step"][0] == 4
            assert tg["confidence"] == OWN_CONF["confidence"]
            assert tg["weights"] == pf_body["weights"]
            assert tg["speculate"] is pf_body["speculate"]
            if pf_body["speculate"]:
                # Every candidate drawn ahead was taken by a particle or dropped; the
                # audit above holds with the dropped ones' tokens billed.
                assert tg["ahead_used"] > 0 and tg["ahead_dropped"] >= 0
                assert tg["ahead_used"] + tg["ahead_dropped"] <= sum(tg["candidates_per_step"])
    assert right >= 2  # easy questions: the testbed model is right on them greedily


def test_thinking_and_solution_budgets_hold_on_every_path(openai_client: Any) -> None:
    q = make_questions("test", 1, seed=32, min_ops=9, max_ops=9)[0]
    r, headers = ask(
        openai_client,
        q,
        "beam-search",
        2,
        extra_body={"expansions": 2},
        headers={"X-Budget-Thinking": "14", "X-Budget-Solution": "12"},
    )
    tg = r.model_extra["thinkgate"]
    audit(r, tg)
    assert headers["x-budget-applied"] == "thinking=14;solution=12;samples=2"
    choice = r.choices[0]
    # Every step was capped so that no path's thinking passed 14 tokens.
    assert max(tg["tokens_per_step"]) <= 14 * tg["candidates_per_step"][0]
    reasoning = choice.message.model_extra["reasoning_content"]
    assert len(reasoning) <= 14  # one character per token in the testbed
    # Nine operations do not fit in 14 tokens: the paths the budget reached were closed
    # by it. The returned one is such a path, or one that closed its thinking itself
    # inside the budget (the PRM-weighted vote may prefer it; sampling is unseeded).
    cut = choice.model_extra["thinkgate"]["budget_cut"]
    assert cut[:1] == ["thinking"] or (cut == [] and len(reasoning) < 14), (cut, reasoning)
    assert tg["forced_paths"] >= 1 or tg["complete_paths"] >= 2
    assert "\\boxed{" in choice.message.content


def test_streaming_sends_a_progress_event_per_step_then_the_answer(
    live_server: Any, served_model: str
) -> None:
    body = {
        "model": served_model,
        "messages": [{"role": "user", "content": EASY[0].prompt}],
        "temperature": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"X-Strategy": "particle-filtering", "X-Budget-Samples": "3"}
    progress: list[dict[str, Any]] = []
    chunks: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        f"{live_server.base_url}/v1/chat/completions",
        json=body,
        headers=headers,
        timeout=120,
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith(": thinkgate.progress "):
                progress.append(json.loads(line.split(" ", 2)[2]))
            elif line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    assert progress and [p["step"] for p in progress if "step" in p] == list(
        range(1, 1 + sum(1 for p in progress if "step" in p))
    )
    text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
    reasoning = "".join(
        c["choices"][0]["delta"].get("reasoning_content") or "" for c in chunks if c.get("choices")
    )
    assert "\\boxed{" in text and reasoning
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] > 0


def test_a_client_that_leaves_aborts_every_path(live_server: Any, served_model: str) -> None:
    before = live_server.metrics().get(ABORTED, 0)
    hard = make_questions("test", 1, seed=33, min_ops=12, max_ops=12)[0]
    body = {
        "model": served_model,
        "messages": [{"role": "user", "content": hard.prompt}],
        "temperature": 1.0,
        "expansions": 4,
    }
    live_server.post_and_leave(
        "/v1/chat/completions",
        body,
        {"X-Strategy": "beam-search", "X-Budget-Samples": "16"},
    )
    deadline = time.monotonic() + 30
    while True:
        m = live_server.metrics()
        if m.get(ABORTED, 0) > before and m[UNFINISHED] == 0 and m[INFLIGHT] == 0:
            break
        assert time.monotonic() < deadline, f"not aborted: {m.get(ABORTED)} {m.get(UNFINISHED)}"
        time.sleep(0.2)


def test_best_of_n_scored_by_the_prm(openai_client: Any) -> None:
    """``scorer: prm``: every sample's lowest step reward, one PRM call for the pool; with
    ``select: vote`` the answer classes of largest summed reward win."""
    q = EASY[0]
    r, _ = ask(openai_client, q, "best-of-n", 4, extra_body={"scorer": "prm", "select": "vote"})
    tg = r.model_extra["thinkgate"]
    assert tg["scorer"] == "prm" and tg["rule"] == "weighted-majority", tg
    assert tg["samples"] == 4 and sum(c["count"] for c in tg["classes"]) <= 4
    for c in tg["classes"]:
        assert 0.0 <= c["mean_reward"] <= 1.0, c
    chosen = r.choices[0].model_extra["thinkgate"]
    assert 0.0 <= chosen["reward"] <= 1.0
    weight = {c["answer"]: c["mean_reward"] * c["count"] for c in tg["classes"]}
    assert weight[chosen["answer"]] == pytest.approx(max(weight.values()), abs=1e-5)


def test_adaptive_vote_draws_the_same_pool_in_rounds(openai_client: Any) -> None:
    """``adaptive`` tuned never to settle draws rounds of 4 up to the cap: seeded, its
    samples are the ones one draw of 8 makes (each round continues the seeds), and usage
    bills the prompt once per round."""
    q = make_questions("test", 1, seed=33, min_ops=12, max_ops=12)[0]
    prm_vote = {"scorer": "prm", "select": "vote"}
    never = {"adaptive": True, "adaptive_share": 1.0, "adaptive_weight": 100.0}
    one, _ = ask(openai_client, q, "best-of-n", 8, seed=11, extra_body=prm_vote)
    rounds, _ = ask(openai_client, q, "best-of-n", 8, seed=11, extra_body={**prm_vote, **never})
    tg1, tg = one.model_extra["thinkgate"], rounds.model_extra["thinkgate"]
    assert tg["adaptive"]["rounds"] == 2 and tg["adaptive"]["stopped"] == "cap", tg["adaptive"]
    assert tg["samples"] == 8 and tg["engine_requests"] == 2
    assert tg["sample_tokens"] == tg1["sample_tokens"]
    assert tg["sample_answers"] == tg1["sample_answers"]
    assert rounds.usage.completion_tokens == one.usage.completion_tokens
    assert rounds.usage.prompt_tokens == 2 * one.usage.prompt_tokens


def test_adaptive_vote_stops_once_settled(openai_client: Any) -> None:
    """On easy questions the PRM-weighted vote settles before the cap of 16: fewer
    samples drawn, each billed; the leader holds at least half the weight."""
    drawn = []
    for q in EASY:
        r, _ = ask(
            openai_client,
            q,
            "best-of-n",
            16,
            extra_body={"scorer": "prm", "select": "vote", "adaptive": True},
        )
        tg = r.model_extra["thinkgate"]
        ad = tg["adaptive"]
        assert tg["samples"] == min(16, 4 * ad["rounds"]) and ad["cap"] == 16, ad
        if ad["stopped"] == "settled":
            assert ad["leader_share"] >= 0.5, ad
        else:
            assert ad["stopped"] == "cap" and tg["samples"] == 16, ad
        assert r.usage.completion_tokens == sum(tg["sample_tokens"])
        drawn.append(tg["samples"])
    assert min(drawn) < 16, drawn  # the testbed model agrees with itself on easy questions


def test_the_generators_certainty_rewards_steps_without_the_prm(openai_client: Any) -> None:
    r, _ = ask(openai_client, EASY[0], "particle-filtering", 4, extra_body={"reward": "certainty"})
    tg = r.model_extra["thinkgate"]
    assert tg["reward"] == "certainty" and tg["prm_calls"] == 0 and tg["prm_tokens"] == 0
    assert r.usage.completion_tokens == sum(tg["tokens_per_step"]) + tg["answer_tokens"]
    rewards = tg["chosen_step_rewards"]
    assert rewards and all(0.0 < x <= 1.0 for x in rewards)
    assert "\\boxed{" in r.choices[0].message.content


def test_bad_search_options_are_400s(openai_client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        ask(openai_client, EASY[0], "dvts", 6, extra_body={"expansions": 4})
    assert err.value.body["param"] == "samples"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        ask(openai_client, EASY[0], "beam-search", 2, extra_body={"aggregate": "mean"})
    assert err.value.body["param"] == "aggregate"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        ask(openai_client, EASY[0], "best-of-n", 4, extra_body={"scorer": "prm", "adaptive": True})
    assert err.value.body["param"] == "adaptive"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        ask(openai_client, EASY[0], "particle-filtering", 2, extra_body={"weights": "product"})
    assert err.value.body["param"] == "weights"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as err:
        ask(openai_client, EASY[0], "step-rejection", 2, extra_body={"accept": 2})
    assert err.value.body["param"] == "accept"  # type: ignore[index]
