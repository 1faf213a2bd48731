"""Hostile input to the Batch API: schemathesis cases drawn from the live
``/openapi.json``'s ``/v1/files`` and ``/v1/batches`` operations (multipart uploads
included), sent over real HTTP with a tenant's key to the gateway over a scripted engine
(fast: no vLLM). No answer may be a 5xx, and the cases must get past the keys and the
schema's own refusals: some uploads are stored and some batches created."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from conftest import uvicorn_in_thread

from benchmarks.fuzz import run_fuzz
from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.settings import Settings
from server.tenancy.tenants import hashed

KEY = "tg-fuzz-batch-api"
ONLY = r"^(?!/v1/(files|batches)(/|$))"  # every operation but the Batch API's, left out
CASES = 400  # about 10 s on 2 cores


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory, testbed_tokens: Any) -> Iterator[str]:
    tmp: Path = tmp_path_factory.mktemp("fuzz-batch-api")
    keys = tmp / "keys.toml"
    keys.write_text(f'[tenants.fuzz]\nkeys = ["{hashed(KEY)}"]\n')

    async def handler(r: GenerateRequest) -> Sequence[Sample]:
        return samples_of(testbed_tokens, *["3\n</think>\\boxed{3}"] * max(1, r.sampling.n))

    engine = ScriptedEngine(handler, tokens=testbed_tokens, model_name="testbed-base")
    settings = Settings(
        reward_model="none",
        prm_model="none",
        state_dir=str(tmp / "state"),
        keys_file=str(keys),
        batch_max_file_bytes=64 * 1024,
    )
    config = uvicorn.Config(create_app(settings, engine=engine), log_level="warning")
    with uvicorn_in_thread(config) as port:
        yield f"http://127.0.0.1:{port}"


def test_fuzzed_files_and_batches_get_no_server_error(base_url: str) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    report = run_fuzz(base_url, CASES, seed=2, skip_paths=ONLY, headers=auth)
    shown = json.dumps({k: v for k, v in report.items() if k != "server_errors"}, indent=1)
    assert not report["classes"].get("5xx"), json.dumps(report["server_errors"], indent=1)
    assert not report["classes"].get("no_answer"), shown
    assert report["cases"] >= CASES * 0.9, shown
    routes = " ".join(report["top_refusals"]) + " " + " ".join(report["answered"])
    for operation in ("POST /v1/files", "POST /v1/batches", "GET /v1/files", "GET /v1/batches"):
        assert operation in routes, shown  # every route was reached, not only one
    assert report["statuses"].get("401", 0) == 0, shown  # the key was sent every time
    assert report["answered"].get("POST /v1/files", 0) >= 5, shown  # uploads were stored
    assert report["answered"].get("POST /v1/batches", 0) >= 1, shown  # from a stored file
