"""The locustfile drives the live server for real (loopback, bounded in time) with no
failures, and the report builder reads what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.report import read_stats, render, sweep_report

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_locust_mix_runs_clean(base_url: str, tmp_path: Path) -> None:
    prefix = tmp_path / "locust"
    records = tmp_path / "sweep-r4.jsonl"  # as loadtests.sweep names a 4 req/s run
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "loadtests" / "locustfile.py"),
            "--headless",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "12s",
            "--host",
            base_url,
            "--csv",
            str(prefix),
            "--only-summary",
            "--stop-timeout",
            "60",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ, "THINKGATE_LOAD_RECORDS": str(records)},
    )
    stats = {s.name: s for s in read_stats(prefix)}
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"plain", "elastic"} <= set(stats), stats
    assert sum(s.requests for s in stats.values()) >= 4
    assert all(s.failures == 0 for s in stats.values()), render(list(stats.values()))
    assert (
        subprocess.run(
            [sys.executable, "-m", "loadtests.report", str(prefix)], capture_output=True, cwd=ROOT
        ).returncode
        == 0
    )
    assert Path(f"{prefix}_latency.png").stat().st_size > 1000
    # Every request left a record; streams carry their token timings (real SSE parsing).
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    # Every counted request left a record; requests that end after locust's final stats
    # (users finish their task within --stop-timeout) add a few more (CI: 67 for 65).
    assert len(rows) >= sum(s.requests for s in stats.values() if not s.name.startswith("TT"))
    streamed = [r for r in rows if r["name"] == "plain (stream)"]
    if streamed:
        r = streamed[0]
        ttfo = r["ttfo_ms"] if r["ttfo_ms"] is not None else r["e2e_ms"]  # no answer: cut
        assert 0 < r["ttft_ms"] <= ttfo <= r["e2e_ms"], r
        assert r["reasoning_tokens"] is not None and r["completion_tokens"] > 0, r
    text = sweep_report(tmp_path / "sweep", slo_ttft_ms=1000.0, slo_e2e_ms=5000.0)
    assert "| 4 |" in text
    assert (tmp_path / "sweep_goodput.png").stat().st_size > 1000
