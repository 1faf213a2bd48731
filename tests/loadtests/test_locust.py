"""The locustfile drives the live server for real (loopback, bounded in time) with no
failures, and the report builder reads what it wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.report import read_stats, render

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_locust_mix_runs_clean(base_url: str, tmp_path: Path) -> None:
    prefix = tmp_path / "locust"
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
            "20s",
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
