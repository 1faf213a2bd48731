"""Self-consistency, Best-of-N and Best-of-Majority end to end: the openai SDK against the
live server (real vLLM engine on the testbed ``base`` model; the testbed ``reward`` model
in a second in-process vLLM engine, attached by the server's default resources).

The ``thinkgate`` object lists every sample's token counts, answer and reward, so the
tests audit usage and the selection rule from outside: usage is the exact sum over all
samples, and the returned classes are what docs/specs.md §3 and §5 say.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

import testbed
from strategies.answers import equivalent
from testbed.task import Question, make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

HARD = make_questions("test", 4, seed=21, min_ops=7, max_ops=10)
HAS_REWARD = (testbed.model_path("reward") / "config.json").exists()
_no_reward = pytest.mark.skipif(not HAS_REWARD, reason="testbed reward model not trained yet")
# The remote gateway starts no vLLM engine of its own, so no in-process reward model.
_local_reward = pytest.mark.local_only("the in-process reward model runs in the local gateway")


def needs_reward(test: Any) -> Any:
    return _local_reward(_no_reward(test))


def ask(
    client: Any,
    q: Question,
    strategy: str,
    headers: dict[str, str],
    **kw: Any,
) -> tuple[Any, dict[str, Any], Any]:
    raw = client.chat.completions.with_raw_response.create(
        model="testbed-base",
        messages=[{"role": "user", "content": q.prompt}],
        extra_headers={"X-Strategy": strategy, **headers},
        temperature=1.0,
        **kw,
    )
    r = raw.parse()
    return r, r.model_extra["thinkgate"], raw.headers


def audit_usage(r: Any, tg: dict[str, Any], tok: Any, n: int, q: Question) -> None:
    """Usage is the exact sum over every sample (the prompt once: one engine request);
    each returned choice is the sample it names, token for token."""
    assert tg["samples"] == n and tg["engine_requests"] == 1
    assert len(tg["sample_tokens"]) == n
    assert r.usage.completion_tokens == sum(tg["sample_tokens"])
    assert r.usage.completion_tokens_details.reasoning_tokens == sum(tg["sample_reasoning_tokens"])
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": q.prompt}], add_generation_prompt=True, tokenize=True
    )
    ids = prompt if isinstance(prompt, list) else prompt["input_ids"]
    assert r.usage.prompt_tokens == len(ids)
    for choice in r.choices:
        i = choice_info(choice)["sample_index"]
        reasoning = len(
            tok.encode(choice.message.reasoning_content or "", add_special_tokens=False)
        )
        content = len(tok.encode(choice.message.content or "", add_special_tokens=False))
        assert reasoning == tg["sample_reasoning_tokens"][i]
        if choice.finish_reason == "stop":  # </think> and EOS are the two unseen tokens
            assert reasoning + 1 + content + 1 == tg["sample_tokens"][i]


def n_tokens(tok: Any, text: str | None) -> int:
    return len(tok.encode(text or "", add_special_tokens=False))


def choice_info(choice: Any) -> dict[str, Any]:
    info = choice.model_extra.get("thinkgate")
    assert isinstance(info, dict), choice
    return info


def check_classes(tg: dict[str, Any], n: int) -> None:
    """Class counts, frequencies and mean rewards agree with the per-sample lists."""
    answers, rewards = tg["sample_answers"], tg["sample_rewards"]
    assert sum(c["count"] for c in tg["classes"]) + tg["unanswered"] == n
    assert tg["unanswered"] == sum(a is None for a in answers)
    for c in tg["classes"]:
        assert c["frequency"] == pytest.approx(c["count"] / n, abs=1e-6)
        members = [i for i, a in enumerate(answers) if a is not None and a.strip() == c["answer"]]
        assert len(members) <= c["count"]  # equal strings are the same class (and more may be)
        if rewards is not None:
            assert c["mean_reward"] is not None
    reps = [c["answer"] for c in tg["classes"]]
    assert len(set(reps)) == len(reps)


def test_self_consistency_majority_vote(openai_client: Any, hf_tokenizer: Any) -> None:
    for q in HARD[:2]:
        r, tg, headers = ask(openai_client, q, "self-consistency", {"X-Budget-Samples": "8"})
        assert headers["X-Budget-Applied"].startswith("samples=8")
        assert tg["strategy"] == "self-consistency" and tg["rule"] == "majority"
        assert tg["scorer"] is None and tg["sample_rewards"] is None
        audit_usage(r, tg, hf_tokenizer, 8, q)
        check_classes(tg, 8)
        assert len(r.choices) == 1
        top = max(tg["classes"], key=lambda c: c["count"])  # max() keeps the first on ties
        assert choice_info(r.choices[0])["answer"] is not None
        assert choice_info(r.choices[0])["count"] == top["count"]
        assert [c["answer"] for c in tg["classes"] if c["selected"]] == [top["answer"]]


@needs_reward
def test_best_of_majority_returns_k_classes_best_first(
    openai_client: Any, hf_tokenizer: Any
) -> None:
    n, k = 16, 3
    for q in HARD:
        r, tg, headers = ask(
            openai_client, q, "best-of-majority", {"X-Budget-Samples": str(n), "X-Budget-K": str(k)}
        )
        assert "samples=16" in headers["X-Budget-Applied"] and "k=3" in headers["X-Budget-Applied"]
        assert tg["scorer"] == "reward" and tg["alpha"] == pytest.approx(0.02)
        audit_usage(r, tg, hf_tokenizer, n, q)
        check_classes(tg, n)
        infos = [choice_info(c) for c in r.choices]
        assert 1 <= len(r.choices) <= k
        assert [c.index for c in r.choices] == list(range(len(r.choices)))
        answers = [i["answer"] for i in infos]
        assert len(set(answers)) == len(answers)  # distinct classes
        means = [i["mean_reward"] for i in infos]
        assert means == sorted(means, reverse=True)  # best first
        assert all(i["frequency"] >= 0.02 for i in infos)
        # The representative of each class is its best-rewarded sample.
        for info in infos:
            same = [
                rw
                for a, rw in zip(tg["sample_answers"], tg["sample_rewards"], strict=True)
                if a is not None and info["answer"] == a.strip()
            ]
            if same:
                assert info["reward"] == pytest.approx(max(same), abs=1e-5)
        # Fewer than k only when fewer classes exist.
        if len(r.choices) < k:
            assert len(tg["classes"]) == len(r.choices)


@needs_reward
def test_alpha_above_every_frequency_falls_back_to_majority(openai_client: Any) -> None:
    q = HARD[0]
    r, tg, _ = ask(
        openai_client,
        q,
        "best-of-majority",
        {"X-Budget-Samples": "8"},
        extra_body={"alpha": 1.0},
    )
    assert tg["alpha"] == 1.0
    top = max(c["frequency"] for c in tg["classes"])
    if top < 1.0:
        assert tg["rule"] == "majority" and "alpha" in tg["fallback"]
        best = max(tg["classes"], key=lambda c: c["count"])
        assert choice_info(r.choices[0])["answer"] == best["answer"]
    else:  # every sample agreed: the filter keeps that one class
        assert tg["rule"] == "best-of-majority" and tg["fallback"] is None


@needs_reward
def test_best_of_n_picks_the_highest_mean_reward(openai_client: Any, hf_tokenizer: Any) -> None:
    r, tg, _ = ask(
        openai_client, HARD[1], "best-of-n", {"X-Budget-Samples": "8", "X-Budget-K": "2"}
    )
    audit_usage(r, tg, hf_tokenizer, 8, HARD[1])
    means = sorted((c["mean_reward"] for c in tg["classes"]), reverse=True)
    assert [choice_info(c)["mean_reward"] for c in r.choices] == means[: len(r.choices)]
    assert tg["rule"] == "best-of-n"


@needs_reward
def test_reward_is_the_reward_models_logit_on_the_rendered_turn(openai_client: Any) -> None:
    """The in-process vLLM reward engine scores exactly what the reward model was
    trained on (testbed ``reward_text``): checked against transformers on the same text."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from testbed.engine import reward_text
    from testbed.tokenizer import CharCodec

    q = HARD[2]
    r, tg, _ = ask(openai_client, q, "best-of-n", {"X-Budget-Samples": "4", "X-Budget-K": "2"})
    model = AutoModelForSequenceClassification.from_pretrained(
        str(testbed.model_path("reward")), dtype=torch.float32
    ).eval()
    codec = CharCodec()
    checked = 0
    for choice in r.choices:
        if choice.finish_reason != "stop" or not choice.message.content:
            continue  # the text below assumes thinking closed and an answer followed
        checked += 1
        completion = f"{choice.message.reasoning_content or ''}</think>{choice.message.content}"
        ids = codec.encode(reward_text(q, completion))
        with torch.no_grad():
            expected = float(model(input_ids=torch.tensor([ids])).logits[0, 0])
        assert choice_info(choice)["reward"] == pytest.approx(expected, abs=1e-3)
    assert checked >= 1


@needs_reward
def test_alpha_zero_is_best_of_n_on_the_same_pool(openai_client: Any) -> None:
    """docs/specs.md §3: alpha = 0 gives answer-level Best-of-N. A seed fixes the pool
    (vLLM seeds child j with seed + j), so both strategies see the same samples."""
    headers = {"X-Budget-Samples": "16", "X-Budget-K": "3"}
    q = HARD[0]
    r1, bom, _ = ask(
        openai_client, q, "best-of-majority", headers, seed=1234, extra_body={"alpha": 0}
    )
    r2, bon, _ = ask(openai_client, q, "best-of-n", headers, seed=1234)
    assert bom["sample_answers"] == bon["sample_answers"]  # the same pool
    assert [choice_info(c)["answer"] for c in r1.choices] == [
        choice_info(c)["answer"] for c in r2.choices
    ]
    assert bom["rule"] == "best-of-majority" and bon["rule"] == "best-of-n"


@needs_reward
def test_k1_alpha_at_the_unique_mode_is_majority(openai_client: Any) -> None:
    """docs/specs.md §3: k = 1 and alpha = the (unique) top frequency reduce BoM to
    majority voting; same seeded pool for both strategies."""
    checked = 0
    for q in HARD:
        r1, sc, _ = ask(openai_client, q, "self-consistency", {"X-Budget-Samples": "16"}, seed=7)
        counts = sorted((c["count"] for c in sc["classes"]), reverse=True)
        if len(counts) > 1 and counts[0] == counts[1]:
            continue  # no unique mode: the property does not apply
        alpha = counts[0] / 16
        r2, bom, _ = ask(
            openai_client,
            q,
            "best-of-majority",
            {"X-Budget-Samples": "16"},
            seed=7,
            extra_body={"alpha": alpha},
        )
        assert bom["sample_answers"] == sc["sample_answers"]
        assert choice_info(r2.choices[0])["answer"] == choice_info(r1.choices[0])["answer"]
        checked += 1
    assert checked >= 1


def test_logprob_scorer_is_the_mean_token_logprob(openai_client: Any, hf_tokenizer: Any) -> None:
    r, tg, _ = ask(
        openai_client,
        HARD[2],
        "best-of-n",
        {"X-Budget-Samples": "6"},
        extra_body={"scorer": "logprob"},
    )
    assert tg["scorer"] == "logprob"
    audit_usage(r, tg, hf_tokenizer, 6, HARD[2])
    assert all(rw is not None and rw <= 0.0 for rw in tg["sample_rewards"])


def test_budgets_compose_per_sample(openai_client: Any, hf_tokenizer: Any) -> None:
    t, s, n = 8, 16, 8
    r, tg, headers = ask(
        openai_client,
        HARD[3],
        "self-consistency",
        {"X-Budget-Samples": str(n), "X-Budget-Thinking": str(t), "X-Budget-Solution": str(s)},
    )
    assert headers["X-Budget-Applied"] == f"thinking={t};solution={s};samples={n}"
    budget = dict(tg["per_sample_budget"])
    # Unseeded, a sample may close its thinking within t tokens on its own (CI saw 7 of 8
    # cut once): most are cut, none is cut twice.
    cut = budget.pop("thinking_cut")
    assert budget == {"thinking": t, "solution": s, "mode": "one-pass"}
    assert n // 2 <= cut <= n
    audit_usage(r, tg, hf_tokenizer, n, HARD[3])
    assert all(rt <= t for rt in tg["sample_reasoning_tokens"])
    if cut == n:  # then the chosen answer's thinking was cut at t too
        assert choice_info(r.choices[0])["budget_cut"][0] == "thinking"
    assert all(ct <= t + 1 + s for ct in tg["sample_tokens"])
    assert sum(a is not None for a in tg["sample_answers"]) >= n // 2  # cut, yet they answer


@needs_reward  # BoM's default scorer; the logprob fallback needs one-pass budgets (a 400)
def test_budgets_compose_in_two_pass_mode(openai_client: Any, hf_tokenizer: Any) -> None:
    """Without the logits processor (forced here with ``elastic_mode``) the same
    per-sample contract holds through elastic's two-pass fallback: one thinking
    request with n = N, then one answer request per sample."""
    t, s, n = 6, 12, 4
    r, tg, _ = ask(
        openai_client,
        HARD[2],
        "best-of-majority",
        {"X-Budget-Samples": str(n), "X-Budget-Thinking": str(t), "X-Budget-Solution": str(s)},
        extra_body={"elastic_mode": "two-pass"},
    )
    assert tg["per_sample_budget"]["mode"] == "two-pass"
    assert tg["engine_requests"] == 1 + n
    assert r.usage.completion_tokens == sum(tg["sample_tokens"])
    assert r.usage.completion_tokens_details.reasoning_tokens == sum(tg["sample_reasoning_tokens"])
    assert all(rt <= t for rt in tg["sample_reasoning_tokens"])
    assert all(ct <= t + 1 + s for ct in tg["sample_tokens"])
    for choice in r.choices:
        i = choice_info(choice)["sample_index"]
        assert (
            n_tokens(hf_tokenizer, choice.message.reasoning_content)
            == (tg["sample_reasoning_tokens"][i])
        )


def test_streaming_sends_progress_then_the_answer(base_url: str) -> None:
    n = 6
    body = {
        "model": "testbed-base",
        "messages": [{"role": "user", "content": HARD[0].prompt}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"X-Strategy": "self-consistency", "X-Budget-Samples": str(n)}
    progress: list[dict[str, Any]] = []
    chunks: list[dict[str, Any]] = []
    with httpx.stream(
        "POST", f"{base_url}/v1/chat/completions", json=body, headers=headers, timeout=120
    ) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith(": thinkgate.progress "):
                assert not chunks, "progress after the answer started"
                progress.append(json.loads(line.removeprefix(": thinkgate.progress ")))
            elif line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
    # A slow machine may first get the "admitted" event (headers sent after
    # FIRST_EVENT_WAIT_S with nothing drawn yet); then one event per sample, in order.
    growing = [p for p in progress if "growing" in p]
    assert all(len(p["growing"]) == n and p["samples"] == n for p in growing)
    progress = [p for p in progress if "growing" not in p]
    admitted = [p for p in progress if "samples_done" not in p]
    assert all(p == {"status": "admitted", "strategy": "self-consistency"} for p in admitted)
    assert len(admitted) <= 1 and (not admitted or progress[0] == admitted[0])
    drawn = progress[len(admitted) :]
    assert [p["samples_done"] for p in drawn] == list(range(1, n + 1))
    assert all(p["samples"] == n for p in drawn)
    assert sorted(p["sample"]["index"] for p in drawn) == list(range(n))
    assert all(p["sample"]["tokens"] > 0 for p in drawn)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    tg = next(c["thinkgate"] for c in chunks if "thinkgate" in c)
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == sum(tg["sample_tokens"])
    assert content and "\\boxed{" in content


def test_disconnect_mid_draw_aborts_all_samples(live_server: Any) -> None:
    """A client that leaves mid-draw aborts the one engine request of all N samples."""
    aborted = 'thinkgate_aborted_requests_total{reason="client_disconnect"}'
    before = live_server.metrics().get(aborted, 0.0)
    body = {
        "model": "testbed-base",
        "messages": [{"role": "user", "content": HARD[0].prompt}],
        "max_tokens": 440,
        "ignore_eos": True,  # every sample runs long: surely unfinished when we leave
    }
    # 64 x 440 tokens take the CPU engine seconds: the client leaves mid-draw.
    headers = {"X-Strategy": "self-consistency", "X-Budget-Samples": "64"}
    live_server.post_and_leave("/v1/chat/completions", body, headers)
    deadline = time.monotonic() + 30
    while True:
        m = live_server.metrics()
        unfinished = m["thinkgate_engine_unfinished_requests"]
        if m.get(aborted, 0.0) > before and unfinished == 0:
            break
        assert time.monotonic() < deadline, (m.get(aborted), unfinished)
        time.sleep(0.2)


def test_streaming_through_the_sdk(openai_client: Any) -> None:
    stream = openai_client.chat.completions.create(
        model="testbed-base",
        messages=[{"role": "user", "content": HARD[1].prompt}],
        extra_headers={"X-Strategy": "self-consistency", "X-Budget-Samples": "4"},
        stream=True,
    )
    content, finish = [], None
    for chunk in stream:
        for c in chunk.choices:
            content.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "\\boxed{" in "".join(content) and finish in ("stop", "length")


@pytest.mark.parametrize(
    ("strategy", "headers", "body", "param"),
    [
        ("best-of-majority", {"X-Budget-Samples": "4"}, {"alpha": 2}, "alpha"),
        ("best-of-majority", {"X-Budget-Samples": "4"}, {"alpha": "high"}, "alpha"),
        ("best-of-n", {"X-Budget-Samples": "4"}, {"scorer": "oracle"}, "scorer"),
        ("self-consistency", {"X-Budget-Samples": "4"}, {"scorer": "reward"}, "scorer"),
        ("best-of-n", {"X-Budget-Samples": "4"}, {"alpha": 0.1}, "alpha"),
        ("best-of-n", {"X-Budget-Samples": "4"}, {"select": "sum"}, "select"),
        # Log-probabilities are no weights to sum (select vote is for scorer prm).
        ("best-of-n", {"X-Budget-Samples": "4"}, {"scorer": "logprob", "select": "vote"}, "select"),
        ("self-consistency", {"X-Budget-Samples": "2", "X-Budget-K": "3"}, {}, "k"),
    ],
)
def test_bad_requests_are_400(
    openai_client: Any, strategy: str, headers: dict[str, str], body: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(
            model="testbed-base",
            messages=[{"role": "user", "content": HARD[0].prompt}],
            extra_headers={"X-Strategy": strategy, **headers},
            extra_body=body,
        )
    assert err.value.status_code == 400
    error: Any = err.value.body or {}
    assert param in (error.get("param") or "").lower()


def test_a_scorer_the_server_lacks_is_a_503_naming_the_flag(openai_client: Any) -> None:
    # The request is right; the server has no verifier: not the client's fault (no 400).
    with pytest.raises(openai.InternalServerError) as err:
        openai_client.with_options(max_retries=0).chat.completions.create(
            model="testbed-base",
            messages=[{"role": "user", "content": HARD[0].prompt}],
            extra_headers={"X-Strategy": "best-of-n", "X-Budget-Samples": "4"},
            extra_body={"scorer": "verifier"},
        )
    assert err.value.status_code == 503
    error: Any = err.value.body or {}
    assert error["code"] == "resource_unavailable" and error["param"] == "scorer"
    assert "--verifier-url" in error["message"]


@pytest.mark.acceptance
def test_self_consistency_16_beats_one_sample_by_10_points(openai_client: Any) -> None:
    """Acceptance: on 6+ operation questions, majority over 16 samples is at least 10
    points more accurate than one sample at the same temperature. Single-sample
    accuracy is measured on the same draws: the share of right answers among all 16
    samples of each question (an unbiased estimate, with 16x less variance than one
    extra request per question)."""
    questions = make_questions("test", 32, seed=5, min_ops=6, max_ops=12)

    def one(q: Question) -> tuple[bool, float]:
        r, tg, _ = ask(openai_client, q, "self-consistency", {"X-Budget-Samples": "16"})
        voted = choice_info(r.choices[0])["answer"]
        gold = str(q.answer)
        single = [a is not None and equivalent(a, gold) for a in tg["sample_answers"]]
        return voted is not None and equivalent(voted, gold), sum(single) / len(single)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, questions))
    sc = 100 * sum(ok for ok, _ in results) / len(results)
    single = 100 * sum(s for _, s in results) / len(results)
    print(f"self-consistency@16 {sc:.1f}%  single sample {single:.1f}%")
    assert sc >= single + 10, (sc, single)
