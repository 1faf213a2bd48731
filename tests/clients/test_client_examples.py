"""The client examples run as users run them, against the live server."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CLIENTS = Path(__file__).resolve().parents[2] / "clients"


def test_python_example(base_url: str) -> None:
    out = subprocess.run(
        [sys.executable, str(CLIENTS / "python_example.py"), "--base-url", f"{base_url}/v1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd="/",
    )
    steps = {line["step"]: line for line in map(json.loads, out.stdout.splitlines())}
    plain = steps["plain"]
    assert plain["thinkgate"]["strategy"] == "plain"
    assert plain["reasoning_tokens"] is not None
    assert plain["completion_tokens"] >= plain["reasoning_tokens"]
    assert steps["budgeted"]["applied"] == "thinking=24;solution=12"
    assert steps["budgeted"]["request_id"]
    assert steps["budgeted"]["reasoning_tokens"] <= 24
    assert steps["streamed"]["thinkgate"]["strategy"] == "plain"
    assert steps["streamed"]["total_tokens"] > 0


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_example(base_url: str) -> None:
    out = subprocess.run(
        ["bash", str(CLIENTS / "curl_example.sh"), base_url],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    text = out.stdout
    assert '"object":"chat.completion"' in text
    assert "x-budget-applied: thinking=24;solution=12" in text.lower()
    assert "data: [DONE]" in text
    assert '"param":"X-Budget-Thinking"' in text


def test_budget_headers_helper() -> None:
    sys.path.insert(0, str(CLIENTS))
    try:
        from thinkgate_client import budget_headers
    finally:
        sys.path.remove(str(CLIENTS))
    assert budget_headers(strategy="pets", samples=8, k=2) == {
        "X-Strategy": "pets",
        "X-Budget-Samples": "8",
        "X-Budget-K": "2",
    }
    assert budget_headers() == {}
    for bad in ({"thinking": -1}, {"samples": 0}, {"k": True}, {"solution": 1.5}):
        with pytest.raises(ValueError):
            budget_headers(**bad)
