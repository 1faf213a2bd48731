"""A request-rate sweep with locust: the load report users of LLM load tools expect.

    python -m loadtests.sweep --host http://127.0.0.1:8000 --rates 2,4,8,12 \\
        --seconds 40 --out runs/sweep
    # -> runs/sweep_sweep.md, runs/sweep_latency.png, runs/sweep_goodput.png

Each rate is one headless locust run of ``loadtests/locustfile.py`` (the same strategy
mix), every user paced so that all of them together offer the target rate (closed
loop: when latency exceeds what ``--users`` can cover, the achieved rate falls below
the offered one, which the report shows). Per-request records (TTFT, time to first
answer token, ITL, end-to-end, reasoning and answer tokens) go to
``<out>-r<rate>.jsonl``; ``loadtests.report --sweep <out>`` turns them into the
tables and plots, with goodput against the SLOs given here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from loadtests.report import git_sha, meta_path, sweep_report

ROOT = Path(__file__).resolve().parent.parent


def locust_command(host: str, rate: float, users: int, seconds: float, out: Path) -> list[str]:
    """One headless locust run offering ``rate`` requests a second.

    Users start at the offered rate (locust's spawn rate), one every ``1 / rate`` s, and
    each fires its first request as it starts, then one every ``users / rate`` s: the
    arrivals are spread from the first second on. Starting every user at once made all
    their first requests one burst (64 users at 2 req/s: 64 requests in the first
    second, read as 22.8 req/s achieved)."""
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "locustfile.py")]
    cmd += ["--headless", "-u", str(users), "-r", f"{rate:g}", "-t", f"{int(seconds)}s"]
    cmd += ["--host", host, "--only-summary", "--stop-timeout", "60"]
    cmd += ["--csv", f"{out}-r{rate:g}"]
    return cmd


def run_rate(host: str, rate: float, users: int, seconds: float, out: Path) -> Path:
    records = Path(f"{out}-r{rate:g}.jsonl")
    records.unlink(missing_ok=True)
    env = dict(os.environ)
    env["THINKGATE_LOAD_RECORDS"] = str(records)
    env["THINKGATE_LOAD_RATE_PER_USER"] = str(rate / users)
    cmd = locust_command(host, rate, users, seconds, out)
    meta = {"users": users, "seconds": seconds, "host": host, "git": git_sha()}
    meta_path(records).write_text(json.dumps(meta))
    subprocess.run(cmd, cwd=ROOT, env=env, check=False, capture_output=True)
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.sweep", description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--rates", default="2,4,8,12", help="offered requests per second")
    parser.add_argument("--seconds", type=float, default=40.0, help="per rate")
    parser.add_argument("--users", type=int, default=32, help="locust users (concurrency cap)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--slo-e2e-ms", type=float, default=5000.0)
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for rate in (float(r) for r in args.rates.split(",")):
        print(f"[sweep] {rate:g} req/s for {args.seconds:g} s ...", flush=True)
        run_rate(args.host, rate, args.users, args.seconds, args.out)
    print(sweep_report(args.out, slo_ttft_ms=args.slo_ttft_ms, slo_e2e_ms=args.slo_e2e_ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
