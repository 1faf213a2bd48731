"""``pets`` end to end: the live server (real vLLM, testbed model), the openai SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from strategies.pets.labels import K0, PATTERNS
from strategies.pets.table import DEFAULT_TABLE, PetsTable
from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

QUESTIONS = make_questions("test", 3, seed=5, min_ops=2, max_ops=6)


def ask(
    client: Any,
    model: str,
    prompt: str,
    cap: int | None,
    average: int | None = None,
    **extra: Any,
) -> Any:
    headers = {"X-Strategy": "pets"}
    if average is not None:
        headers["X-Budget-Samples"] = str(average)
    return client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        extra_headers=headers,
        extra_body={"cap": cap} if cap is not None else None,
        **extra,
    )


def thinkgate(resp: Any) -> dict[str, Any]:
    info = (resp.model_extra or {})["thinkgate"]
    assert isinstance(info, dict)
    return info


@pytest.mark.parametrize("cap", [None, 6, 2])
def test_pets_answers_with_warmup_bucket_and_respects_cap(
    openai_client: Any, served_model: str, cap: int | None
) -> None:
    table = PetsTable.load(DEFAULT_TABLE) if DEFAULT_TABLE.exists() else None
    for q in QUESTIONS:
        resp = ask(openai_client, served_model, q.prompt, cap, temperature=1.0)
        info = thinkgate(resp)
        samples = info["samples"]
        limit = cap if cap is not None else (table.b_max if table else 16)
        assert info["strategy"] == "pets"
        assert 1 <= samples <= limit
        assert info["cap"] == limit
        # Every drawn trajectory is accounted for: votes + unanswered = samples.
        assert sum(v["count"] for v in info["votes"]) + info["unanswered"] == samples
        assert resp.usage.completion_tokens >= samples
        # One engine request for the warm-up, one more only if the bucket asked for more.
        assert info["engine_requests"] == (2 if samples > min(K0, limit) else 1)
        if cap is not None and cap < K0:
            assert samples == cap and info["bucket"] is None
            continue
        assert info["bucket"] in PATTERNS
        if table is not None:
            assert info["mode"] == "table"
            planned = table.replanned(table.average_budget, max(limit, table.k0))
            assert info["allocated"] == planned.budget(info["bucket"])
            assert samples == min(info["allocated"], limit)
        else:
            assert info["mode"] == "adaptive"
        if info["answer"] is not None:
            assert info["answer"] in resp.choices[0].message.content
            top = max(v["count"] for v in info["votes"])
            assert next(v for v in info["votes"] if v["answer"] == info["answer"])["count"] == top


@pytest.mark.skipif(not DEFAULT_TABLE.exists(), reason="no shipped PETS table")
def test_two_averages_spend_what_they_planned(openai_client: Any, served_model: str) -> None:
    """X-Budget-Samples is the average the request is planned for: each question gets
    its bucket's budget under the plan solved for that average, and the plans differ."""
    table = PetsTable.load(DEFAULT_TABLE)
    plans = {avg: table.replanned(avg, table.b_max) for avg in (6, 16)}
    assert plans[6].expected_budget <= 6 + 1e-9 < plans[16].expected_budget <= 16 + 1e-9
    for avg, plan in plans.items():
        for q in QUESTIONS[:2]:
            info = thinkgate(ask(openai_client, served_model, q.prompt, None, avg, temperature=1.0))
            assert info["average_budget"] == avg
            assert info["planned_average"] == pytest.approx(plan.expected_budget, abs=1e-3)
            assert info["allocated"] == plan.budget(info["bucket"])
            assert info["samples"] == info["allocated"]


def test_pets_rejects_bad_budgets_before_sampling(openai_client: Any, served_model: str) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        ask(openai_client, served_model, QUESTIONS[0].prompt, None, 0)
    assert err.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as err:
        ask(openai_client, served_model, QUESTIONS[0].prompt, 0)
    assert err.value.body["param"] == "cap"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        ask(openai_client, served_model, QUESTIONS[0].prompt, None, n=2)


def test_calibrate_through_a_running_server(base_url: str, tmp_path: Any) -> None:
    import json

    from strategies.pets.calibration.cli import main
    from strategies.pets.calibration.pools import load_pools

    questions = tmp_path / "q.jsonl"
    train = make_questions("train", 3, seed=21, min_ops=1, max_ops=4)
    questions.write_text(
        "".join(json.dumps({"prompt": q.prompt, "answer": q.answer}) + "\n" for q in train)
    )
    pools, out = tmp_path / "pools.jsonl", tmp_path / "table.json"
    # A pool of 20 is larger than the server's n cap (16): two requests per question.
    args = ["pets", "--questions", str(questions), "--pool", "20", "--average-budget", "6"]
    args += ["--server", base_url, "--pools", str(pools), "--out", str(out), "--k-max", "8"]
    assert main([*args, "--max-tokens", "300"]) == 0
    records = load_pools(pools)
    assert [len(r.answers) for r in records] == [20, 20, 20]
    assert [r.item.gold for r in records] == [str(q.answer) for q in train]
    table = PetsTable.load(out)
    assert table.expected_budget <= 6 + 1e-9 and table.calibration["pool"] == 20
