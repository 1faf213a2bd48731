"""The Batch API on the live server (the real engine, local and remote), through the
OpenAI SDK: a batch of chat lines, one running a strategy under a budget, one refused,
answered into its output and error files."""

from __future__ import annotations

import io
import time
from typing import Any

import orjson
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]


def _completed(c: Any, batch_id: str) -> Any:
    """The batch once completed (it runs, or the test fails within 120 s)."""
    deadline = time.monotonic() + 120
    while (batch := c.batches.retrieve(batch_id)).status != "completed":
        assert batch.status == "in_progress" and time.monotonic() < deadline, batch
        time.sleep(0.2)
    return batch


def test_a_batch_on_the_real_engine(openai_client: Any, served_model: str) -> None:
    def line(custom_id: str, **body: Any) -> bytes:
        return orjson.dumps(
            {
                "custom_id": custom_id,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": served_model,
                    "messages": [{"role": "user", "content": "Compute 3+4 mod 10."}],
                    "max_tokens": 64,
                    "seed": 1,
                    **body,
                },
            }
        )

    content = b"\n".join(
        [
            line("plain"),
            line("elastic", budget={"thinking": 16, "solution": 8}),
            line("too-long", max_tokens=10**6),
        ]
    )
    c = openai_client
    upload = c.files.create(file=("q.jsonl", io.BytesIO(content)), purpose="batch")
    batch = c.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    batch = _completed(c, batch.id)
    assert (batch.request_counts.completed, batch.request_counts.failed) == (2, 1)
    out = [orjson.loads(x) for x in c.files.content(batch.output_file_id).content.splitlines()]
    assert [o["custom_id"] for o in out] == ["plain", "elastic"]
    elastic = out[1]["response"]["body"]
    assert elastic["thinkgate"]["strategy"] == "elastic"
    assert elastic["usage"]["completion_tokens"] <= 30  # 16 thinking, the delimiter, 8
    assert out[0]["response"]["body"]["choices"][0]["message"]["content"]
    (err,) = [orjson.loads(x) for x in c.files.content(batch.error_file_id).content.splitlines()]
    assert err["custom_id"] == "too-long" and err["response"]["status_code"] == 400


def test_an_allocation_batch_on_the_real_engine(openai_client: Any, served_model: str) -> None:
    questions = ["Compute 3+4 mod 10.", "Compute 2*3+1 mod 10."]
    content = b"\n".join(
        orjson.dumps(
            {
                "custom_id": f"q{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": served_model,
                    "messages": [{"role": "user", "content": q}],
                    "max_tokens": 64,
                },
            }
        )
        for i, q in enumerate(questions)
    )
    c = openai_client
    upload = c.files.create(file=("q.jsonl", io.BytesIO(content)), purpose="batch")
    batch = c.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        extra_body={"allocation": {"method": "pets", "total_budget": 5, "seed": 3}},
    )
    batch = _completed(c, batch.id)
    out = [orjson.loads(x) for x in c.files.content(batch.output_file_id).content.splitlines()]
    assert [o["custom_id"] for o in out] == ["q0", "q1"]
    tg = [o["response"]["body"]["thinkgate"] for o in out]
    assert sum(t["samples"] for t in tg) == batch.model_extra["allocation"]["samples_drawn"] <= 5
    assert all(t["samples"] >= 1 and t["strategy"] == "pets-offline" for t in tg)
