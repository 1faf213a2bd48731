"""``thinkgate replica --port P``, as docs/deployment.md writes it (no other flag: the
default model at its default 65,536-token context), starts, is healthy and answers: the
suite's own replicas run at a short context, which once hid that vLLM refused the
default's step size on CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest

from server.calibrate.local_server import free_port, started

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.vllm
@pytest.mark.slow
def test_a_replica_with_the_documented_flags_starts_and_answers(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "replica", "--port", str(port)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "replica.log"
    with started(
        cmd, port=port, ready_path="/health", log=log, timeout_s=600, env=env, cwd=ROOT
    ) as (url, _):
        models = httpx.get(f"{url}/v1/models", timeout=30).json()
        assert models["data"][0]["max_model_len"] == 65536
        done = httpx.post(
            f"{url}/v1/completions",
            json={"model": "testbed-base", "prompt": "Compute 3+4 mod 10.", "max_tokens": 8},
            timeout=120,
        )
        assert done.status_code == 200, done.text
        assert done.json()["usage"]["completion_tokens"] >= 1
