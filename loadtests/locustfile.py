"""Load test of a thinkgate server with locust: a seeded mix of strategies and budgets.

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8000 \
        --headless -u 16 -r 4 -t 2m --csv runs/locust
    python -m loadtests.report runs/locust      # table + PNG from the CSVs

Each scenario is its own request name, so locust's stats split by strategy; streamed
requests also report time to first token (``TTFT <scenario>``) and to the last byte.
The questions are testbed prompts ("Compute 3+8-5 mod 10."), generated here without
importing the project (a load generator runs anywhere).
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from locust import HttpUser, between, events, task

SEED = int(os.environ.get("THINKGATE_LOAD_SEED", "1234"))
MODEL = os.environ.get("THINKGATE_LOAD_MODEL", "testbed-base")


def question(rng: random.Random) -> str:
    ops = rng.randint(1, 12)
    expr = str(rng.randint(0, 9))
    for _ in range(ops):
        expr += rng.choice("+-") + str(rng.randint(0, 9))
    return f"Compute {expr} mod 10."


class ThinkgateUser(HttpUser):
    """One client; scenarios weighted like a mixed production workload."""

    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        self.rng = random.Random(SEED + id(self) % 10_000)

    def _chat(self, name: str, headers: dict[str, str], **body: Any) -> None:
        payload = {"model": MODEL, "messages": [{"role": "user", "content": question(self.rng)}]}
        payload.update(body)
        with self.client.post(
            "/v1/chat/completions", json=payload, headers=headers, name=name, catch_response=True
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"{resp.status_code}: {resp.text[:200]}")
                return
            data = resp.json()
            if not data["choices"] or data["choices"][0]["message"].get("content") is None:
                resp.failure("no answer")

    @task(3)
    def plain(self) -> None:
        self._chat("plain", {}, temperature=0.0, max_tokens=256)

    @task(3)
    def elastic(self) -> None:
        t = self.rng.choice([0, 16, 32, 64, 128])
        self._chat(
            "elastic",
            {"X-Strategy": "elastic", "X-Budget-Thinking": str(t), "X-Budget-Solution": "16"},
            temperature=1.0,
        )

    @task(2)
    def self_consistency(self) -> None:
        self._chat(
            "self-consistency",
            {"X-Strategy": "self-consistency", "X-Budget-Samples": "4"},
            temperature=1.0,
        )

    @task(2)
    def streamed(self) -> None:
        payload = {
            "model": MODEL,
            "messages": [{"role": "user", "content": question(self.rng)}],
            "stream": True,
            "temperature": 0.0,
            "max_tokens": 256,
        }
        start = time.perf_counter()
        first: float | None = None
        with self.client.post(
            "/v1/chat/completions",
            json=payload,
            stream=True,
            name="plain (stream)",
            catch_response=True,
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"{resp.status_code}")
                return
            done = False
            for line in resp.iter_lines():
                if not line or not line.startswith(b"data: "):
                    continue
                if line == b"data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                if first is None and chunk.get("choices"):
                    first = time.perf_counter()
            if not done:
                resp.failure("stream ended without [DONE]")
                return
        if first is not None:
            events.request.fire(  # type: ignore[no-untyped-call]
                request_type="SSE",
                name="TTFT plain (stream)",
                response_time=(first - start) * 1000.0,
                response_length=0,
                exception=None,
                context={},
            )
