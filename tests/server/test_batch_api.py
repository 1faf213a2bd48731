"""The OpenAI Batch API through the unmodified OpenAI SDK, on both stores (SQLite under
the state dir, and a real PostgreSQL server): files uploaded, listed, read and deleted;
batches of chat, completions and responses lines created, polled, their output and
error files read; bad input answered as OpenAI does; cancel; tenants kept apart. The
gateway's own app and uvicorn in this process, over a scripted engine (fast tier)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import openai
import orjson
import pytest
import uvicorn
from conftest import uvicorn_in_thread
from postgres import postgres_server

from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.settings import Settings
from server.tenancy.tenants import hashed

ANSWER = "3\n</think>\\boxed{3}"
KEYS = {"alpha": "tg-batch-alpha", "beta": "tg-batch-beta"}
ENGINES: dict[str, ScriptedEngine] = {}  # by URL: what the engine was asked


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, testbed_tokens: Any
) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("batches")
    keys = tmp / "keys.toml"
    keys.write_text("".join(f'[tenants.{t}]\nkeys = ["{hashed(k)}"]\n' for t, k in KEYS.items()))

    async def handler(r: GenerateRequest) -> Sequence[Sample]:
        if r.sampling.max_tokens == 7:  # the lines a test wants slow
            import asyncio

            await asyncio.sleep(0.3)
        return samples_of(testbed_tokens, *[ANSWER] * max(1, r.sampling.n))

    engine = ScriptedEngine(handler, tokens=testbed_tokens, model_name="testbed-base")

    def serve(store: str | None) -> Iterator[str]:
        settings = Settings(
            reward_model="none",
            prm_model="none",
            state_dir=str(tmp),
            keys_file=str(keys),
            batch_store=store,
            batch_max_file_bytes=64 * 1024,
            batch_lease_s=2.0,
        )
        config = uvicorn.Config(create_app(settings, engine=engine), log_level="warning")
        with uvicorn_in_thread(config) as port:
            ENGINES[f"http://127.0.0.1:{port}/v1"] = engine
            yield f"http://127.0.0.1:{port}/v1"

    if request.param == "sqlite":
        yield from serve(None)
    else:
        with postgres_server() as pg:
            yield from serve(pg)


def client(url: str, tenant: str = "alpha") -> Any:
    return openai.OpenAI(base_url=url, api_key=KEYS[tenant], max_retries=0)


def jsonl(*lines: dict[str, Any]) -> bytes:
    return b"\n".join(orjson.dumps(line) for line in lines) + b"\n"


def chat(custom_id: str, model: str = "testbed-base", **body: Any) -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": model,
            "messages": [{"role": "user", "content": "Compute 1+2 mod 10."}],
            "max_tokens": 20,
            **body,
        },
    }


def allocated(c: Any, lines: bytes, allocation: dict[str, Any]) -> Any:
    """A chat batch of ``lines`` created with ``allocation``."""
    upload = c.files.create(file=("in.jsonl", io.BytesIO(lines)), purpose="batch")
    return c.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        extra_body={"allocation": allocation},
    )


def wait(c: Any, batch_id: str, *statuses: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = c.batches.retrieve(batch_id)
        if batch.status in statuses:
            return batch
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)


def test_a_chat_batch_round_trip(url: str) -> None:
    c = client(url)
    lines = jsonl(
        chat("plain"),
        chat("voted", strategy="self-consistency", budget={"samples": 3}),
        chat("unknown-model", model="no-such-model"),
        chat("bad-field", temperature="hot"),
    )
    upload = c.files.create(file=("in.jsonl", io.BytesIO(lines)), purpose="batch")
    assert (
        upload.purpose == "batch" and upload.bytes == len(lines) and upload.filename == "in.jsonl"
    )
    assert c.files.retrieve(upload.id).id == upload.id
    assert c.files.content(upload.id).content == lines
    batch = c.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"run": "smoke"},
    )
    assert batch.status == "in_progress" and batch.metadata == {"run": "smoke"}
    done = wait(c, batch.id, "completed")
    assert done.request_counts.total == 4
    assert (done.request_counts.completed, done.request_counts.failed) == (2, 2)
    output = [orjson.loads(x) for x in c.files.content(done.output_file_id).content.splitlines()]
    assert [o["custom_id"] for o in output] == ["plain", "voted"]
    voted = output[1]["response"]
    assert voted["status_code"] == 200, voted
    assert voted["body"]["thinkgate"]["strategy"] == "self-consistency"
    assert (
        voted["body"]["usage"]["completion_tokens"]
        == 3 * output[0]["response"]["body"]["usage"]["completion_tokens"]
    )
    assert voted["body"]["choices"][0]["message"]["content"] == "\\boxed{3}"
    errors = [orjson.loads(x) for x in c.files.content(done.error_file_id).content.splitlines()]
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [
        ("unknown-model", 404),
        ("bad-field", 400),
    ]
    assert errors[1]["response"]["body"]["error"]["param"] == "temperature"
    assert c.files.retrieve(done.output_file_id).purpose == "batch_output"
    assert batch.id in [b.id for b in c.batches.list(limit=100)]
    # The lines' engine calls name the batch's tenant and the batch objective.
    asked = {(r.tenant, r.objective) for r in ENGINES[url].calls}
    assert ("alpha", "batch") in asked and (None, None) not in asked
    assert upload.id in [f.id for f in c.files.list(purpose="batch")]


@pytest.mark.parametrize(
    ("endpoint", "body", "field"),
    [
        ("/v1/completions", {"prompt": "Compute 1+2 mod 10.", "max_tokens": 20}, "choices"),
        ("/v1/responses", {"input": "Compute 1+2 mod 10.", "max_output_tokens": 20}, "output"),
    ],
)
def test_completions_and_responses_batches(
    url: str, endpoint: str, body: dict[str, Any], field: str
) -> None:
    c = client(url)
    line = {
        "custom_id": "one",
        "method": "POST",
        "url": endpoint,
        "body": {"model": "testbed-base", **body},
    }
    upload = c.files.create(file=("in.jsonl", io.BytesIO(jsonl(line))), purpose="batch")
    batch = c.batches.create(input_file_id=upload.id, endpoint=endpoint, completion_window="24h")
    done = wait(c, batch.id, "completed")
    (out,) = [orjson.loads(x) for x in c.files.content(done.output_file_id).content.splitlines()]
    assert out["response"]["status_code"] == 200 and out["response"]["body"][field]
    assert done.error_file_id is None
    if endpoint == "/v1/responses":  # stored for the batch's tenant: its key reads it
        stored = out["response"]["body"]["id"]
        assert c.responses.retrieve(stored).id == stored
        with pytest.raises(openai.NotFoundError):
            client(url, "beta").responses.retrieve(stored)


def test_a_malformed_file_fails_the_batch_naming_each_bad_line(url: str) -> None:
    c = client(url)
    content = jsonl(chat("a")) + b"{not json\n" + jsonl(chat("a"))
    upload = c.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = c.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "failed"
    assert [(e.line, e.code) for e in batch.errors.data] == [
        (2, "invalid_json_line"),
        (3, "duplicate_custom_id"),
    ]
    assert batch.request_counts.total == 0


def test_bad_requests_are_answered_as_openai_does(url: str) -> None:
    c = client(url)
    with pytest.raises(openai.BadRequestError) as info:
        c.files.create(file=("in.jsonl", io.BytesIO(jsonl(chat("a")))), purpose="fine-tune")
    assert info.value.body["param"] == "purpose"
    with pytest.raises(openai.APIStatusError) as too_big:
        c.files.create(file=("in.jsonl", io.BytesIO(b"x" * 70 * 1024)), purpose="batch")
    assert too_big.value.status_code == 413
    with pytest.raises(openai.NotFoundError):
        c.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    upload = c.files.create(file=("in.jsonl", io.BytesIO(jsonl(chat("a")))), purpose="batch")
    with pytest.raises(openai.BadRequestError) as info:
        c.batches.create(
            input_file_id=upload.id, endpoint="/v1/embeddings", completion_window="24h"
        )
    assert info.value.body["param"] == "endpoint"
    done = wait(
        c,
        c.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
        "completed",
    )
    with pytest.raises(openai.BadRequestError) as info:  # an output file is not an input
        c.batches.create(
            input_file_id=done.output_file_id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
    assert info.value.body["param"] == "input_file_id"
    with pytest.raises(openai.BadRequestError):
        c.batches.cancel(done.id)  # over
    # The file can go; the batch keeps its record.
    assert c.files.delete(upload.id).deleted
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(upload.id)


def test_cancel_ends_the_batch_with_what_was_answered(url: str) -> None:
    c = client(url)
    lines = jsonl(*[chat(f"slow{i}", max_tokens=7) for i in range(40)])
    upload = c.files.create(file=("in.jsonl", io.BytesIO(lines)), purpose="batch")
    batch = c.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    time.sleep(0.5)
    assert c.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = wait(c, batch.id, "cancelled")
    answered = done.request_counts.completed + done.request_counts.failed
    assert answered < 40 and done.cancelled_at is not None


def test_tenants_see_only_their_own_files_and_batches(url: str) -> None:
    alpha, beta = client(url, "alpha"), client(url, "beta")
    upload = alpha.files.create(file=("in.jsonl", io.BytesIO(jsonl(chat("a")))), purpose="batch")
    batch = alpha.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    for call in (
        lambda: beta.files.retrieve(upload.id),
        lambda: beta.files.content(upload.id),
        lambda: beta.batches.retrieve(batch.id),
        lambda: beta.batches.cancel(batch.id),
        lambda: beta.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert batch.id not in [b.id for b in beta.batches.list()]
    wait(alpha, batch.id, "completed")


def test_an_allocation_batch_spreads_one_budget_over_its_lines(url: str) -> None:
    c = client(url)
    lines = jsonl(*[chat(f"q{i}") for i in range(4)])
    batch = allocated(c, lines, {"method": "pets", "total_budget": 10, "cap": 4})
    allocation = batch.model_extra["allocation"]
    assert allocation["method"] == "pets" and allocation["job_id"].startswith("pbatch_")
    done = wait(c, batch.id, "completed")
    assert (done.request_counts.total, done.request_counts.completed) == (4, 4)
    shown = done.model_extra["allocation"]
    assert shown["job_id"] == allocation["job_id"] and shown["total_budget"] == 10
    output = [orjson.loads(x) for x in c.files.content(done.output_file_id).content.splitlines()]
    assert [o["custom_id"] for o in output] == ["q0", "q1", "q2", "q3"]
    bodies = [o["response"]["body"] for o in output]
    assert all(o["response"]["status_code"] == 200 for o in output)
    assert {b["thinkgate"]["strategy"] for b in bodies} == {"pets-offline"}
    samples = [b["thinkgate"]["samples"] for b in bodies]
    assert all(1 <= n <= 4 for n in samples) and sum(samples) == shown["samples_drawn"] <= 10
    assert {b["choices"][0]["message"]["content"] for b in bodies} == {"\\boxed{3}"}
    # The job is also on the PETS route, completed.
    job = httpx.get(
        f"{url}/pets/batches/{allocation['job_id']}",
        headers={"Authorization": f"Bearer {KEYS['alpha']}"},
    )
    assert job.status_code == 200 and job.json()["status"] == "completed"
    # Another tenant does not see it there: a 404, and not in its list.
    beta = {"Authorization": f"Bearer {KEYS['beta']}"}
    for path in ("", "/output", "/events"):
        other = httpx.get(f"{url}/pets/batches/{allocation['job_id']}{path}", headers=beta)
        assert other.status_code == 404, path
    listed = httpx.get(f"{url}/pets/batches", headers=beta).json()["data"]
    assert allocation["job_id"] not in {j["id"] for j in listed}


def test_bad_allocations_are_400s_naming_the_field(url: str) -> None:
    c = client(url)
    upload = c.files.create(file=("in.jsonl", io.BytesIO(jsonl(chat("a")))), purpose="batch")
    voted = jsonl(chat("a", strategy="self-consistency"))
    planned = c.files.create(file=("in.jsonl", io.BytesIO(voted)), purpose="batch")
    cases = [
        ({"method": "beam"}, upload, "/v1/chat/completions", "allocation.method"),
        (
            {"method": "pets", "total_budget": 4, "x": 1},
            upload,
            "/v1/chat/completions",
            "allocation.x",
        ),
        (
            {"method": "pets", "total_budget": "4"},
            upload,
            "/v1/chat/completions",
            "allocation.total_budget",
        ),
        ({"method": "pets"}, upload, "/v1/chat/completions", "allocation.budget"),
        (
            {"method": "pets", "total_budget": 4, "cap": 0},
            upload,
            "/v1/chat/completions",
            "allocation.cap",
        ),
        ({"method": "pets", "total_budget": 4}, upload, "/v1/completions", "endpoint"),
        ({"method": "pets", "total_budget": 4}, planned, "/v1/chat/completions", "allocation"),
        ("pets", upload, "/v1/chat/completions", "allocation"),
    ]
    for allocation, source, endpoint, param in cases:
        with pytest.raises(openai.BadRequestError) as info:
            c.batches.create(
                input_file_id=source.id,
                endpoint=endpoint,
                completion_window="24h",
                extra_body={"allocation": allocation},
            )
        assert info.value.body["param"] == param, (allocation, info.value.body)


def test_cancelling_an_allocation_batch_stops_its_job(url: str) -> None:
    c = client(url)
    lines = jsonl(*[chat(f"slow{i}", max_tokens=7) for i in range(8)])
    batch = allocated(c, lines, {"method": "pets", "average_budget": 16, "round_size": 1})
    time.sleep(0.5)
    assert c.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    done = wait(c, batch.id, "cancelled")
    assert done.output_file_id is None and done.request_counts.completed == 0
    job = httpx.get(
        f"{url}/pets/batches/{batch.model_extra['allocation']['job_id']}",
        headers={"Authorization": f"Bearer {KEYS['alpha']}"},
    )
    assert job.json()["status"] == "cancelled"
