"""Hostile input: a few hundred requests generated from the live server's own
``/openapi.json`` (schemathesis; some fit the schema, some do not), sent over real HTTP.
No answer may be a 5xx, and the engine must serve a normal request afterwards."""

from __future__ import annotations

import json

import httpx
import pytest

from benchmarks.fuzz import run_fuzz

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CASES = 400
TRANSLATED_CASES = 200


def test_fuzzed_requests_get_no_server_error(base_url: str, served_model: str) -> None:
    report = run_fuzz(base_url, CASES, seed=0)
    shown = json.dumps({k: v for k, v in report.items() if k != "server_errors"}, indent=1)
    assert not report["classes"].get("5xx"), json.dumps(report["server_errors"], indent=1)
    assert not report["classes"].get("no_answer"), shown
    assert report["cases"] >= CASES * 0.9, shown
    assert report["classes"].get("2xx", 0) >= 10, shown  # some cases reached the engine
    ok = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={
            "model": served_model,
            "messages": [{"role": "user", "content": "Compute 1+2 mod 10."}],
            "max_tokens": 8,
        },
        timeout=120,
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert httpx.get(f"{base_url}/ready", timeout=30).status_code == 200


def test_fuzzed_responses_and_messages_get_no_server_error(base_url: str) -> None:
    """The same over /v1/responses and /v1/messages alone (their schemas published)."""
    only = r"^(?!/v1/(responses|messages)$)"
    report = run_fuzz(base_url, TRANSLATED_CASES, seed=1, skip_paths=only)
    shown = json.dumps({k: v for k, v in report.items() if k != "server_errors"}, indent=1)
    assert not report["classes"].get("5xx"), json.dumps(report["server_errors"], indent=1)
    assert not report["classes"].get("no_answer"), shown
    assert report["cases"] >= TRANSLATED_CASES * 0.9, shown
    assert report["classes"].get("2xx", 0) >= 5, shown
    assert report["classes"].get("4xx", 0) >= 5, shown
