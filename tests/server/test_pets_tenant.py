"""PETS batch jobs are their tenant's requests: the tenant's sample budget caps a job's
samples per question (a cap above it is a 400), the tenant's body limit applies, every
draw is admitted under the tenant's in-flight limit and fair share, and the tokens it
generates are billed to the tenant. The app of ``thinkgate serve`` over a scripted
engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.tenancy.tenants import hashed

KEY = "tg-small"
LIMITS = "budget_samples = 4\nmax_inflight_samples = 2\nmax_body_bytes = 4096"
JSONL = {"Content-Type": "application/jsonl", "Authorization": f"Bearer {KEY}"}


def _lines(n: int) -> str:
    return "\n".join(
        json.dumps(
            {
                "custom_id": f"q{i}",
                "body": {"messages": [{"role": "user", "content": f"What is {i}+1?"}]},
            }
        )
        for i in range(n)
    )


class Engine:
    """Answers every draw after a pause, counting the samples in flight at once."""

    def __init__(self, tokens: Any) -> None:
        self.tokens, self.now, self.most = tokens, 0, 0

    async def __call__(self, request: GenerateRequest) -> Sequence[Sample]:
        n = request.sampling.n
        self.now += n
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.02)
        self.now -= n
        return samples_of(self.tokens, *["1\n</think>\\boxed{1}"] * n)


async def test_a_tenants_batch_job_is_held_to_the_tenants_limits(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[tenants.small]\nkeys = ["{hashed(KEY)}"]\n{LIMITS}\n')
    engine = Engine(testbed_tokens)
    async with scripted_app(engine, keys_file=str(keys)) as app:
        over = await app.client.post(
            "/v1/pets/batches",
            params={"total_budget": 12, "cap": 64},
            content=_lines(4),
            headers=JSONL,
        )
        assert over.status_code == 400 and over.json()["error"]["param"] == "cap"
        big = await app.client.post(
            "/v1/pets/batches", params={"total_budget": 12}, content=_lines(200), headers=JSONL
        )
        assert big.status_code == 413  # the tenant's body limit, not the server's
        r = await app.client.post(
            "/v1/pets/batches",
            params={"total_budget": 12, "seed": 1},
            content=_lines(4),
            headers=JSONL,
        )
        assert r.status_code == 200, r.text
        job = r.json()
        for _ in range(400):
            job = (await app.client.get(f"/v1/pets/batches/{job['id']}", headers=JSONL)).json()
            if job["status"] != "in_progress":
                break
            await asyncio.sleep(0.05)
        assert job["status"] == "completed", job
        assert job["pets"]["samples_drawn"] == 12
        out = await app.client.get(f"/v1/pets/batches/{job['id']}/output", headers=JSONL)
        samples = [
            json.loads(x)["response"]["body"]["thinkgate"]["samples"] for x in out.text.splitlines()
        ]
        assert max(samples) <= 4  # the tenant's budget_samples, not the server's 64
        assert engine.most <= 2  # the tenant's max_inflight_samples held every draw
        metrics = (await app.client.get("/metrics", headers=JSONL)).text
    billed = [
        line
        for line in metrics.splitlines()
        if line.startswith('thinkgate_tenant_tokens_total{kind="completion",tenant="small"}')
    ]
    assert billed and float(billed[0].rsplit(" ", 1)[1]) > 0
