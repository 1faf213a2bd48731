"""``/v1/pets/batches`` end to end: submit JSONL, poll, stream progress, fetch output."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

QUESTIONS = make_questions("test", 6, seed=9, min_ops=1, max_ops=8)
JSONL = "\n".join(
    json.dumps(
        {
            "custom_id": f"q{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": q.prompt}], "max_tokens": 300},
        }
    )
    for i, q in enumerate(QUESTIONS)
)


JSONL_TYPE = {"Content-Type": "application/jsonl"}  # a JSON route's body says its type


def submit(base_url: str, **params: int | float) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/pets/batches", params=params, content=JSONL, headers=JSONL_TYPE, timeout=30
    )


def wait(base_url: str, job_id: str, timeout_s: float = 300) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job: dict[str, object] = httpx.get(f"{base_url}/v1/pets/batches/{job_id}").json()
        if job["status"] != "in_progress":
            return job
        time.sleep(0.5)
    raise AssertionError(f"batch {job_id} still running after {timeout_s} s")


def test_batch_spends_exactly_the_budget_within_caps(base_url: str) -> None:
    resp = submit(base_url, total_budget=20, cap=6, round_size=4, seed=1)
    assert resp.status_code == 200, resp.text
    job = resp.json()
    assert job["object"] == "batch" and job["request_counts"]["total"] == 6
    # Progress over SSE: snapshots until the job ends, then [DONE].
    frames = []
    with httpx.stream("GET", f"{base_url}/v1/pets/batches/{job['id']}/events", timeout=300) as s:
        for line in s.iter_lines():
            if line.startswith("data: "):
                frames.append(line[6:])
    assert frames[-1] == "[DONE]"
    last = json.loads(frames[-2])
    assert last["status"] == "completed"
    drawn = [json.loads(f)["pets"]["samples_drawn"] for f in frames[:-1]]
    assert drawn == sorted(drawn)

    job = wait(base_url, job["id"])
    pets = job["pets"]
    assert isinstance(pets, dict)
    assert pets["samples_drawn"] == min(20, 6 * 6) == 20
    out = httpx.get(f"{base_url}/v1/pets/batches/{job['id']}/output")
    assert out.status_code == 200
    lines = [json.loads(x) for x in out.text.splitlines()]
    assert [x["custom_id"] for x in lines] == [f"q{i}" for i in range(6)]
    total = 0
    for x in lines:
        body = x["response"]["body"]
        info = body["thinkgate"]
        assert 1 <= info["samples"] <= 6  # warm-up gives everyone one; cap 6
        assert sum(v["count"] for v in info["votes"]) <= info["samples"]
        if info["answer"] is not None:
            assert info["votes"][0]["answer"] == info["answer"]
            assert body["choices"][0]["message"]["content"]
        assert body["usage"]["completion_tokens"] >= info["samples"]
        total += info["samples"]
    assert total == 20


def test_batch_errors(base_url: str) -> None:
    assert submit(base_url).status_code == 400  # no budget
    assert submit(base_url, total_budget=5, average_budget=1).status_code == 400
    bad = httpx.post(
        f"{base_url}/v1/pets/batches", params={"total_budget": 3}, content="{}", headers=JSONL_TYPE
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input"
    missing = httpx.get(f"{base_url}/v1/pets/batches/pbatch_nope")
    assert missing.status_code == 404
    assert set(missing.json()["error"]) == {"message", "type", "param", "code"}


def test_cancel_stops_a_running_batch(base_url: str) -> None:
    job = submit(base_url, total_budget=36, cap=6, round_size=1).json()
    cancelled = httpx.post(f"{base_url}/v1/pets/batches/{job['id']}/cancel").json()
    assert cancelled["status"] in ("cancelled", "completed")
    if cancelled["status"] == "cancelled":
        out = httpx.get(f"{base_url}/v1/pets/batches/{job['id']}/output")
        assert out.status_code == 400


def test_batch_cli_round_trips_a_file(base_url: str, tmp_path: object) -> None:
    from pathlib import Path

    from server.batches.pets.cli import main

    src, dst = Path(str(tmp_path)) / "in.jsonl", Path(str(tmp_path)) / "out.jsonl"
    src.write_text("\n".join(JSONL.splitlines()[:3]) + "\n")
    args = ["--in", str(src), "--out", str(dst), "--server", base_url, "--total-budget", "7"]
    assert main([*args, "--cap", "4"]) == 0
    lines = [json.loads(x) for x in dst.read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == ["q0", "q1", "q2"]
    assert sum(x["response"]["body"]["thinkgate"]["samples"] for x in lines) == 7
