"""Load test of a thinkgate server with locust: a seeded mix of strategies and budgets.

    locust -f loadtests/locustfile.py --host http://127.0.0.1:8000 \
        --headless -u 16 -r 4 -t 2m --csv runs/locust
    python -m loadtests.report runs/locust      # table + PNG from the CSVs

Each scenario is its own request name, so locust's stats split by strategy; streamed
requests also report time to first token (``TTFT <scenario>``, reasoning or answer) and
to first *answer* token (``TTFO <scenario>``, after ``</think>``; AIPerf's name).
The questions are testbed prompts ("Compute 3+8-5 mod 10."), generated here without
importing the project (a load generator runs anywhere).

Environment: ``THINKGATE_LOAD_RECORDS=FILE`` appends one JSON line per request (name,
ok, e2e/ttft/ttfo/itl in ms, reasoning and completion tokens) for
``loadtests.report --sweep``; ``THINKGATE_LOAD_RATE_PER_USER=R`` paces each user at R
requests a second (``loadtests.sweep`` sets it for a target rate).
"""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from locust import HttpUser, between, constant_throughput, events, task

SEED = int(os.environ.get("THINKGATE_LOAD_SEED", "1234"))
MODEL = os.environ.get("THINKGATE_LOAD_MODEL", "testbed-base")
RECORDS = os.environ.get("THINKGATE_LOAD_RECORDS")
RATE_PER_USER = os.environ.get("THINKGATE_LOAD_RATE_PER_USER")


def record(**fields: Any) -> None:
    """One request's figures, for the sweep report (a line per request, appended)."""
    if RECORDS:
        with open(RECORDS, "a") as f:
            f.write(json.dumps({"t": time.time(), **fields}) + "\n")


def _usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = data.get("usage") or {}
    details = usage.get("completion_tokens_details") or {}
    return details.get("reasoning_tokens"), usage.get("completion_tokens")


def question(rng: random.Random) -> str:
    ops = rng.randint(1, 12)
    expr = str(rng.randint(0, 9))
    for _ in range(ops):
        expr += rng.choice("+-") + str(rng.randint(0, 9))
    return f"Compute {expr} mod 10."


class ThinkgateUser(HttpUser):
    """One client; scenarios weighted like a mixed production workload."""

    wait_time = constant_throughput(float(RATE_PER_USER)) if RATE_PER_USER else between(0.05, 0.2)

    def on_start(self) -> None:
        self.rng = random.Random(SEED + id(self) % 10_000)

    def _chat(self, name: str, headers: dict[str, str], **body: Any) -> None:
        payload = {"model": MODEL, "messages": [{"role": "user", "content": question(self.rng)}]}
        payload.update(body)
        start = time.perf_counter()
        with self.client.post(
            "/v1/chat/completions", json=payload, headers=headers, name=name, catch_response=True
        ) as resp:
            e2e = (time.perf_counter() - start) * 1000.0
            if resp.status_code != 200:
                resp.failure(f"{resp.status_code}: {resp.text[:200]}")
                record(name=name, ok=False, status=resp.status_code, e2e_ms=e2e)
                return
            data = resp.json()
            if not data["choices"] or data["choices"][0]["message"].get("content") is None:
                resp.failure("no answer")
                record(name=name, ok=False, status=200, e2e_ms=e2e)
                return
            reasoning, completion = _usage(data)
            record(
                name=name,
                ok=True,
                status=200,
                e2e_ms=e2e,
                reasoning_tokens=reasoning,
                completion_tokens=completion,
            )

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
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
            "max_tokens": 256,
        }
        name = "plain (stream)"
        start = time.perf_counter()
        first: float | None = None  # first token, reasoning or answer
        first_answer: float | None = None  # first answer token (after </think>)
        arrivals: list[float] = []  # every chunk that carried text
        usage: dict[str, Any] = {}
        with self.client.post(
            "/v1/chat/completions", json=payload, stream=True, name=name, catch_response=True
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"{resp.status_code}")
                record(name=name, ok=False, status=resp.status_code)
                return
            done = False
            for line in resp.iter_lines():
                if not line or not line.startswith(b"data: "):
                    continue  # SSE comments: progress, keep-alive
                if line == b"data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                for c in chunk.get("choices") or []:
                    delta = c.get("delta") or {}
                    text = delta.get("content") or ""
                    thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
                    if text or thought:
                        now = time.perf_counter()
                        arrivals.append(now)
                        first = first if first is not None else now
                        if text and first_answer is None:
                            first_answer = now
            if not done:
                resp.failure("stream ended without [DONE]")
                record(name=name, ok=False, status=200)
                return
        end = time.perf_counter()
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
        for label, at in (("TTFT", first), ("TTFO", first_answer)):
            if at is not None:
                events.request.fire(  # type: ignore[no-untyped-call]
                    request_type="SSE",
                    name=f"{label} {name}",
                    response_time=(at - start) * 1000.0,
                    response_length=0,
                    exception=None,
                    context={},
                )
        reasoning, completion = _usage({"usage": usage})
        record(
            name=name,
            ok=True,
            status=200,
            e2e_ms=(end - start) * 1000.0,
            ttft_ms=None if first is None else (first - start) * 1000.0,
            ttfo_ms=None if first_answer is None else (first_answer - start) * 1000.0,
            itl_ms=1000.0 * sum(gaps) / len(gaps) if gaps else None,
            reasoning_tokens=reasoning,
            completion_tokens=completion,
        )
