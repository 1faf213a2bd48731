"""``thinkgate replica --port P``, as docs/deployment.md writes it (no other flag: the
default model at its default 65,536-token context), starts, is healthy and answers: the
suite's own replicas run at a short context, which once hid that vLLM refused the
default's step size on CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.servers import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.vllm
@pytest.mark.slow
def test_a_replica_with_the_documented_flags_starts_and_answers(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "replica.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "replica", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, log.read_text()[-4000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(1)
        models = httpx.get(f"{url}/v1/models", timeout=30).json()
        assert models["data"][0]["max_model_len"] == 65536
        done = httpx.post(
            f"{url}/v1/completions",
            json={"model": "testbed-base", "prompt": "Compute 3+4 mod 10.", "max_tokens": 8},
            timeout=120,
        )
        assert done.status_code == 200, done.text
        assert done.json()["usage"]["completion_tokens"] >= 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
