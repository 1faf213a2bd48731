"""The sweep report's arithmetic on records with known figures (the end-to-end run of
the locustfile and the report is in test_locust.py)."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests.report import knee, rate_point, read_sweep, sweep_report


def _write(path: Path, rows: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rows(n: int, span_s: float, e2e_ms: float, ttft_ms: float | None) -> list[dict[str, object]]:
    return [
        {
            "t": 1000.0 + i * span_s / (n - 1),
            "name": "plain (stream)",
            "ok": True,
            "e2e_ms": e2e_ms,
            "ttft_ms": ttft_ms,
            "ttfo_ms": None if ttft_ms is None else ttft_ms + 10,
            "itl_ms": 5.0,
            "reasoning_tokens": 30,
            "completion_tokens": 40,
        }
        for i in range(n)
    ]


def test_goodput_counts_only_requests_meeting_every_slo() -> None:
    rows = _rows(11, 10.0, 200.0, 100.0) + _rows(11, 10.0, 9000.0, 100.0)  # half too slow
    rows.append({"t": 1005.0, "name": "plain", "ok": False, "status": 429, "e2e_ms": 3.0})
    p = rate_point(2.0, rows, slo_ttft_ms=1000.0, slo_e2e_ms=5000.0)
    assert p.requests == 23 and p.failures == 1
    assert abs(p.achieved - 2.2) < 1e-9 and abs(p.goodput - 1.1) < 1e-9
    assert p.latency["TTFO"]["p50"] == 110.0
    assert p.reasoning_tokens == 30 and p.answer_tokens == 10


def test_the_knee_is_the_last_rate_served_within_slo(tmp_path: Path) -> None:
    _write(tmp_path / "s-r1.jsonl", _rows(11, 10.0, 100.0, 50.0))  # 1.1/s, all good
    _write(tmp_path / "s-r2.jsonl", _rows(21, 10.0, 100.0, 50.0))  # 2.1/s, all good
    _write(tmp_path / "s-r4.jsonl", _rows(21, 10.0, 8000.0, 50.0))  # too slow: goodput 0
    runs = read_sweep(tmp_path / "s")
    assert [r["rate"] for r in runs] == [1.0, 2.0, 4.0]
    points = [rate_point(r["rate"], r["records"], 1000.0, 5000.0) for r in runs]
    assert knee(points) == 2.0
    text = sweep_report(tmp_path / "s", slo_ttft_ms=1000.0, slo_e2e_ms=5000.0)
    assert "Knee (goodput >= 90% of the offered rate): 2 req/s" in text
    assert (tmp_path / "s_latency.png").exists() and (tmp_path / "s_goodput.png").exists()


def test_a_sweep_that_never_falls_off_says_no_knee_was_found(tmp_path: Path) -> None:
    _write(tmp_path / "s-r1.jsonl", _rows(11, 10.0, 100.0, 50.0))  # 1.1/s, all good
    _write(tmp_path / "s-r2.jsonl", _rows(21, 10.0, 100.0, 50.0))  # 2.1/s, all good
    text = sweep_report(tmp_path / "s", slo_ttft_ms=1000.0, slo_e2e_ms=5000.0)
    assert "not reached: goodput held at every rate up to 2 req/s" in text


def test_sweep_users_start_at_the_offered_rate(tmp_path: Path) -> None:
    """Arrivals spread from the first second: users spawn at the offered rate (all at
    once, their first requests were one burst), each pacing at its share of it."""
    from loadtests.sweep import locust_command

    cmd = locust_command("http://h", 2.0, 64, 30, tmp_path / "s")
    assert cmd[cmd.index("-u") + 1] == "64" and cmd[cmd.index("-r") + 1] == "2"
    assert cmd[cmd.index("--csv") + 1] == f"{tmp_path / 's'}-r2"


def test_each_rate_reports_the_users_and_code_it_was_recorded_with(tmp_path: Path) -> None:
    """A sweep run in two parts (64 users, then 128 for the high rates) says so per rate,
    and the header names the commit the runs were recorded at, not the reader's."""
    from loadtests.report import meta_path

    for rate, users in ((2, 64), (32, 128)):
        records = tmp_path / f"s-r{rate}.jsonl"
        _write(records, _rows(11, 10.0, 100.0, 50.0))
        meta_path(records).write_text(json.dumps({"users": users, "git": "abc1234"}))
    _write(tmp_path / "s-r4.jsonl", _rows(11, 10.0, 100.0, 50.0))  # recorded before meta
    text = sweep_report(tmp_path / "s", slo_ttft_ms=1000.0, slo_e2e_ms=5000.0)
    assert text.startswith("# Load sweep (abc1234)")
    rows = {
        line.split(" | ")[0]: line.split(" | ")[1]
        for line in text.splitlines()
        if line.startswith("| ") and line[2].isdigit()
    }
    assert rows == {"| 2": "64", "| 4": "", "| 32": "128"}
