"""A PETS batch outlives its gateway: ``kill -9`` mid-batch, restart on the same state
dir, and the job completes with every question answered once (resume by replay)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTIONS = make_questions("test", 8, seed=21, min_ops=2, max_ops=8)
JSONL = "\n".join(
    json.dumps(
        {
            "custom_id": f"q{i}",
            "body": {"messages": [{"role": "user", "content": q.prompt}], "max_tokens": 300},
        }
    )
    for i, q in enumerate(QUESTIONS)
)
BUDGET = 32  # 8 warm-up samples, then 12 rounds of 2: long enough to be killed in


JSONL_TYPE = {"Content-Type": "application/jsonl"}  # a JSON route's body says its type


def job_of(base_url: str, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = httpx.get(f"{base_url}/v1/pets/batches/{job_id}", timeout=10).json()
    return job


def test_a_gateway_killed_mid_batch_resumes_it_on_restart(
    spawn_server: Callable[..., Any], tmp_path: Path
) -> None:
    state = str(tmp_path / "state")
    # No reward engine: it is not used here and its start would double each restart.
    flags = (
        "--state-dir",
        state,
        "--batch-lease-s",
        "2",
        "--reward-model",
        "none",
        "--prm-model",
        "none",
    )
    first = spawn_server(*flags)
    params = {"total_budget": BUDGET, "cap": 8, "round_size": 2, "seed": 5}
    resp = httpx.post(
        f"{first.base_url}/v1/pets/batches",
        params=params,
        content=JSONL,
        headers=JSONL_TYPE,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    job_id = resp.json()["id"]

    # Kill once samples are stored and before the budget is spent.
    deadline = time.monotonic() + 120
    while True:
        job = job_of(first.base_url, job_id)
        assert job["status"] == "in_progress", f"the batch ended before the kill: {job}"
        if job["pets"]["samples_drawn"] > 0:
            break
        assert time.monotonic() < deadline, "no sample stored in 120 s"
        time.sleep(0.02)
    os.killpg(first.process.pid, signal.SIGKILL)  # the gateway and its engine process
    first.process.wait(timeout=30)
    before = job["pets"]["samples_drawn"]

    second = spawn_server(*flags)  # by now the killed gateway's 2 s lease has expired
    listed = httpx.get(f"{second.base_url}/v1/pets/batches", timeout=10).json()
    assert [j["id"] for j in listed["data"]] == [job_id]
    deadline = time.monotonic() + 120
    while (job := job_of(second.base_url, job_id))["status"] == "in_progress":
        assert time.monotonic() < deadline, f"not completed after the restart: {job}"
        time.sleep(0.5)
    assert job["status"] == "completed", job
    pets = job["pets"]
    assert pets["resumed"] == 1 and before <= pets["samples_drawn"] <= BUDGET

    out = httpx.get(f"{second.base_url}/v1/pets/batches/{job_id}/output", timeout=30)
    assert out.status_code == 200, out.text
    lines = [json.loads(x) for x in out.text.splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(f"q{i}" for i in range(len(QUESTIONS)))
    assert len(lines) == len(QUESTIONS)  # every question exactly once
    samples = [x["response"]["body"]["thinkgate"]["samples"] for x in lines]
    assert all(n >= 1 for n in samples)  # the warm-up reached every question
    assert sum(samples) == pets["samples_drawn"]
