"""Never hang: once the engine dies, /ready and every request answer 503 quickly.

Needs its own server (the shared one must stay alive): a dedicated ``thinkgate serve``
whose EngineCore process this test kills."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import httpx
import psutil
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_dead_engine_answers_503_quickly(spawn_server: Callable[..., Any]) -> None:
    server = spawn_server("--max-num-seqs", "8")
    url = f"{server.base_url}/v1/chat/completions"
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": "Compute 1+2 mod 10."}],
        "max_tokens": 8,
    }
    assert httpx.post(url, json=body, timeout=60).status_code == 200

    cores = [
        p
        for p in psutil.Process(server.process.pid).children(recursive=True)
        if "EngineCore" in " ".join([p.name(), *p.cmdline()])
    ]
    assert cores, "no EngineCore process found"
    for p in cores:
        p.send_signal(signal.SIGKILL)

    deadline = time.monotonic() + 30
    while httpx.get(f"{server.base_url}/ready", timeout=5).status_code != 503:
        assert time.monotonic() < deadline, "/ready still says ready"
        time.sleep(0.2)
    for stream in (False, True):
        started = time.monotonic()
        r = httpx.post(url, json={**body, "stream": stream}, timeout=10)
        assert r.status_code == 503, r.text
        assert time.monotonic() - started < 5
        error = r.json()["error"]
        assert error["type"] == "service_unavailable" and error["code"] == "engine_unavailable"
    assert httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200
