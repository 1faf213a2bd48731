"""``thinkgate conformance``: the pack passes against thinkgate (the fast tier over a
scripted engine that bills what it writes; the slow tier against the live server, as the
command runs), and finds a server that bills a fan-out as one sample."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clients.conformance import CHECKS, run_checks
from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "3+4=7\n</think>\\boxed{7}"


def _handler(tokens: Any, *, bill_one: bool = False) -> Callable[..., Sequence[Sample]]:
    """An engine that writes ANSWER, cut at ``max_tokens`` as a real one is."""

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        out = []
        for sample in samples_of(tokens, *[ANSWER] * request.sampling.n):
            limit = request.sampling.max_tokens
            if limit is not None and len(sample.token_ids) > limit:
                sample = replace(sample, token_ids=sample.token_ids[:limit], finish_reason="length")
            out.append(sample)
        return out

    return handler


async def test_the_pack_runs_every_check_against_thinkgate(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        checks = await run_checks(app.client)
    assert [c.name for c in checks] == list(CHECKS)
    print(*checks, sep="\n")
    assert {c.name for c in checks if c.status == "fail"} == set(), checks


async def test_a_server_that_bills_a_fan_out_as_one_sample_fails_it(
    scripted_app: Callable[..., Any], testbed_tokens: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway that reports only the chosen answer's tokens (a common defect: the
    samples a vote drew are billed as one) is caught."""
    async with scripted_app(_handler(testbed_tokens)) as app:
        original = app.client.post

        async def one_sample_billed(url: str, **kw: Any) -> Any:
            r = await original(url, **kw)
            body = kw.get("json") or {}
            if body.get("strategy") and r.status_code == 200:
                data = r.json()
                data["usage"]["completion_tokens"] //= max(1, data["thinkgate"]["samples"])
                r._content = json.dumps(data).encode()
            return r

        monkeypatch.setattr(app.client, "post", one_sample_billed)
        checks = await run_checks(app.client, names=["fan-out-usage"])
    assert checks[0].status == "fail" and "billed" in checks[0].detail


@pytest.mark.vllm
@pytest.mark.slow
def test_thinkgate_conformance_passes_against_the_live_server(base_url: str) -> None:
    """The command as documented, against the suite's live server (real engine)."""
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "conformance", "--base-url", base_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 failed" in done.stderr and "PASS  fan-out-usage" in done.stdout, done.stdout
