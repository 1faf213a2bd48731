"""Tree sampling end to end: the openai SDK against the live server (the real vLLM engine
on the testbed ``base`` model), local and remote engines, streamed and not.

The ``thinkgate`` object reports the tree (segments, forks, stops, leaves, tokens per
segment and by depth, the tokens its leaves share), so the tests audit usage and the
tree's shape from outside.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from strategies.answers import equivalent
from strategies.tree.vote import lead_probability
from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

EASY = make_questions("test", 2, seed=41, min_ops=3, max_ops=5)
ABORTED = 'thinkgate_aborted_requests_total{reason="client_disconnect"}'
UNFINISHED = "thinkgate_engine_unfinished_requests"
INFLIGHT = "thinkgate_inflight_requests"


def audit(r: Any, tree: dict[str, Any]) -> None:
    """Usage is every token generated once: each segment of every branch and the answers;
    the leaves' thinking, as independent samples would hold it, is what the tree
    generated on them and what they share."""
    assert r.usage.completion_tokens == sum(tree["tokens_per_segment"]) + tree["answer_tokens"]
    assert sum(tree["tokens_by_depth"]) == sum(tree["tokens_per_segment"])
    assert len(tree["tokens_per_segment"]) == tree["segments"] >= 1
    on_leaves = sum(tree["tokens_per_segment"]) - tree["stopped_tokens"]
    assert tree["leaf_tokens"] == on_leaves + tree["shared_tokens"]
    assert 0 < r.usage.completion_tokens_details.reasoning_tokens < r.usage.completion_tokens


def test_tree_answers_with_audited_usage(openai_client: Any) -> None:
    right = within = 0
    for i, q in enumerate(EASY):
        raw = openai_client.chat.completions.with_raw_response.create(
            model="testbed-base",
            messages=[{"role": "user", "content": q.prompt}],
            temperature=1.0,
            seed=7 + i,
            extra_headers={"X-Strategy": "tree", "X-Budget-Samples": "8"},
            extra_body={"segment": 16, "roots": 2, "vote": "confidence" if i else "majority"},
        )
        r = raw.parse()
        assert raw.headers["x-budget-applied"] == "samples=8"
        tg = r.model_extra["thinkgate"]
        tree = tg["tree"]
        assert tg["strategy"] == "tree" and tg["samples"] == 8
        audit(r, tree)
        assert tree["leaves"] == 8 == len(tg["leaf_answers"]) == len(tg["leaf_confidences"])
        # Two roots and eight leaves: the roots' first segment (at least) is shared.
        assert tree["roots"] == 2 and tree["forks"] >= 2 and tree["shared_tokens"] > 0
        # Segments run on into the answer: a leaf whose thinking closed with room left in
        # its segment began its answer there (the audit above counts it as an answer).
        within += tree["answered_within"]
        assert tree["answered_within"] <= tree["leaves"]
        assert "\\boxed{" in r.choices[0].message.content
        answer = r.choices[0].model_extra["thinkgate"]["answer"]
        right += answer is not None and equivalent(answer, str(q.answer))
    assert right >= 1  # easy questions: the testbed model is right on them mostly
    assert within >= 1  # of 16 leaves, in 16-token segments
    # The defaults (32-token segments on 32-token cache blocks) with the token fork, on a
    # longer question: the audit holds on the real engine's ids.
    q = make_questions("test", 1, seed=43, min_ops=9, max_ops=10)[0]
    r = openai_client.chat.completions.create(
        model="testbed-base",
        messages=[{"role": "user", "content": q.prompt}],
        temperature=1.0,
        seed=11,
        extra_headers={"X-Strategy": "tree", "X-Budget-Samples": "8"},
        extra_body={"fork_at": "token"},
    )
    tree = r.model_extra["thinkgate"]["tree"]
    audit(r, tree)
    assert (tree["segment"], tree["align"], tree["fork_at"], tree["roots"]) == (32, 32, "token", 4)
    assert tree["leaves"] == 8 and "\\boxed{" in r.choices[0].message.content
    # Budgets hold on every leaf: nine operations do not fit in 20 thinking tokens.
    q = make_questions("test", 1, seed=42, min_ops=9, max_ops=9)[0]
    raw = openai_client.chat.completions.with_raw_response.create(
        model="testbed-base",
        messages=[{"role": "user", "content": q.prompt}],
        temperature=1.0,
        extra_headers={
            "X-Strategy": "tree",
            "X-Budget-Samples": "4",
            "X-Budget-Thinking": "20",
            "X-Budget-Solution": "12",
        },
        extra_body={"segment": 8},
    )
    r = raw.parse()
    assert raw.headers["x-budget-applied"] == "thinking=20;solution=12;samples=4"
    tree = r.model_extra["thinkgate"]["tree"]
    audit(r, tree)
    assert len(r.choices[0].message.model_extra["reasoning_content"]) <= 20  # a token a char
    assert tree["depth"] <= 3  # 8 + 8 + 4 thinking tokens, and no more
    assert tree["answer_tokens"] <= tree["leaves"] * 12


def test_the_vote_stop_settles_early_on_an_easy_question(openai_client: Any) -> None:
    """vote_stop likely, N = 16 in waves of 8, each from 3 roots: on two-operation
    questions the first wave agrees, so the tree stops with at most eight leaves; whatever
    it did, the reported vote obeys the rule and the usage audit holds with the leaves
    answered as they finished."""
    early = 0
    for i, q in enumerate(make_questions("test", 2, seed=44, min_ops=2, max_ops=3)):
        r = openai_client.chat.completions.create(
            model="testbed-base",
            messages=[{"role": "user", "content": q.prompt}],
            temperature=1.0,
            seed=21 + i,
            extra_headers={"X-Strategy": "tree", "X-Budget-Samples": "16"},
            extra_body={"vote_stop": "likely"},
        )
        tg = r.model_extra["thinkgate"]
        tree = tg["tree"]
        audit(r, tree)
        assert (tree["vote_stop"], tree["wave"], tree["roots"]) == ("likely", 8, 3)
        assert tree["leaves"] == len(tg["leaf_answers"]) <= 8 * tree["waves"]
        counts = sorted((c["count"] for c in tg["classes"]), reverse=True) + [0]
        if tree["settled_at"] is None:
            assert tree["leaves"] == 16
        else:
            to_come = 16 - tree["leaves"]
            assert counts[0] - counts[1] > to_come or lead_probability(counts[0], counts[1]) >= 0.95
            early += tree["leaves"] < 16
        assert "\\boxed{" in r.choices[0].message.content
    assert early >= 1


def test_streaming_sends_a_progress_event_per_segment_then_the_answer(
    live_server: Any, served_model: str
) -> None:
    body = {
        "model": served_model,
        "messages": [{"role": "user", "content": EASY[0].prompt}],
        "temperature": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "segment": 12,
    }
    headers = {"X-Strategy": "tree", "X-Budget-Samples": "4"}
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
    segments = [p for p in progress if "segment" in p]
    assert [p["segment"] for p in segments] == list(range(1, len(segments) + 1))
    assert all(p["tree"] for p in segments) and segments[-1]["live"] == 0
    text = "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )
    assert "\\boxed{" in text
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] > 0


def test_a_client_that_leaves_aborts_every_branch(live_server: Any, served_model: str) -> None:
    before = live_server.metrics().get(ABORTED, 0)
    hard = make_questions("test", 1, seed=43, min_ops=12, max_ops=12)[0]
    body = {
        "model": served_model,
        "messages": [{"role": "user", "content": hard.prompt}],
        "temperature": 1.0,
        "segment": 8,
    }
    live_server.post_and_leave(
        "/v1/chat/completions", body, {"X-Strategy": "tree", "X-Budget-Samples": "32"}
    )
    deadline = time.monotonic() + 30
    while True:
        m = live_server.metrics()
        if m.get(ABORTED, 0) > before and m[UNFINISHED] == 0 and m[INFLIGHT] == 0:
            break
        assert time.monotonic() < deadline, f"not aborted: {m.get(ABORTED)} {m.get(UNFINISHED)}"
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"segment": 0}, "segment"),
        ({"vote_stop": "sometimes"}, "vote_stop"),
        ({"next_wave_below": 0.5}, "next_wave_below"),  # applies with a vote stop only
        ({"vote_stop": "likely", "next_wave_below": 1.5}, "next_wave_below"),
    ],
)
def test_bad_options_are_400s_naming_them(
    openai_client: Any, served_model: str, body: dict[str, Any], param: str
) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        openai_client.chat.completions.create(
            model=served_model,
            messages=[{"role": "user", "content": EASY[0].prompt}],
            extra_headers={"X-Strategy": "tree", "X-Budget-Samples": "8"},
            extra_body=body,
        )
    assert err.value.body["param"] == param  # type: ignore[index]
