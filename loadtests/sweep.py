"""A request-rate sweep with locust: the load report users of LLM load tools expect.

    python -m loadtests.sweep --host http://127.0.0.1:8000 --rates 2,4,8,12 \\
        --seconds 40 --out runs/sweep
    # -> runs/sweep_sweep.md, runs/sweep_latency.png, runs/sweep_goodput.png
    python -m loadtests.sweep --tool both --host http://127.0.0.1:8000 --rates 2,4 --out runs/sweep
    # -> also runs/sweep-k6_sweep.md (k6's runs) and runs/sweep_tools.md (the two side by side)

Each rate is one headless locust run of ``loadtests/locustfile.py`` (the same strategy
mix), every user paced so that all of them together offer the target rate (closed
loop: when latency exceeds what ``--users`` can cover, the achieved rate falls below
the offered one, which the report shows). Per-request records (TTFT, time to first
answer token, ITL, end-to-end, reasoning and answer tokens) go to
``<out>-r<rate>.jsonl``; ``loadtests.report --sweep <out>`` turns them into the
tables and plots, with goodput against the SLOs given here.

``--tool k6`` (or ``both``) runs each rate with k6 as well (``loadtests/k6/thinkgate.js``,
open loop: constant arrivals, ``--users`` the most in flight; its mix set to the locust
file's weights: plain 5, elastic 3, self-consistency@4 2; k6 does not stream, so its
table has no TTFT); its per-request points become the same records, under
``<out>-k6-r<rate>.jsonl``, with k6's own summary beside them. ``both`` adds
``<out>_tools.md``: requests a second and p95 of each tool at each rate, same server,
same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.k6_run import run_k6
from loadtests.report import git_sha, meta_path, percentile, read_sweep, sweep_report

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


# The locust file's mix in k6's terms: tasks plain 3 + streamed plain 2, elastic 3 (thinking
# drawn from 0-128, 16 answer tokens; k6 takes one value: their mean), self-consistency@4 2.
K6_MIX = {
    "STRATEGIES": ",".join(["plain"] * 5 + ["elastic"] * 3 + ["self-consistency"] * 2),
    "THINKING": "48",
    "SOLUTION": "16",
    "SAMPLES": "4",
    "MAX_TOKENS": "256",
    "CHECK_RATE": "0",  # a sweep measures past the knee: no threshold fails the run
    "P95_MS": "1e9",
}


def run_rate_k6(host: str, rate: float, users: int, seconds: float, out: Path) -> Path:
    """One k6 run offering ``rate`` requests a second (open loop), as records."""
    records = Path(f"{out}-k6-r{rate:g}.jsonl")
    env = {**K6_MIX, "RATE": f"{rate:g}", "DURATION": f"{int(seconds)}s", "MAX_VUS": str(users)}
    run = run_k6(host, env, records.with_suffix(""))
    records.write_text("".join(json.dumps(r) + "\n" for r in run.records))
    meta = {"users": users, "seconds": seconds, "host": host, "git": git_sha(), "tool": "k6"}
    meta_path(records).write_text(json.dumps(meta))
    return records


def tools_table(out: Path) -> str:
    """Requests a second (answered) and p95 end-to-end of each tool at each rate."""
    lines = [
        "| offered req/s | locust req/s | k6 req/s | locust p95 ms | k6 p95 ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    by_tool = {
        tool: read_sweep(Path(f"{out}{suffix}")) for tool, suffix in (("locust", ""), ("k6", "-k6"))
    }
    rates = sorted({r["rate"] for runs in by_tool.values() for r in runs})
    for rate in rates:
        cells = [f"{rate:g}"]
        stats: dict[str, tuple[float | None, float | None]] = {}
        for tool, runs in by_tool.items():
            rows: list[dict[str, Any]] = next((r["records"] for r in runs if r["rate"] == rate), [])
            ok = [r for r in rows if r.get("ok")]
            ts = [r["t"] for r in rows]
            span = max(ts) - min(ts) if len(ts) > 1 else 1.0
            p95 = percentile([float(r["e2e_ms"]) for r in ok if r.get("e2e_ms") is not None], 0.95)
            stats[tool] = (len(ok) / span if rows else None, p95)
        cells += [("" if stats[t][0] is None else f"{stats[t][0]:.2f}") for t in by_tool]
        cells += [("" if stats[t][1] is None else f"{stats[t][1]:.0f}") for t in by_tool]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.sweep", description=__doc__)
    parser.add_argument("--host", required=True)
    parser.add_argument("--rates", default="2,4,8,12", help="offered requests per second")
    parser.add_argument("--seconds", type=float, default=40.0, help="per rate")
    parser.add_argument("--users", type=int, default=32, help="locust users (concurrency cap)")
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--slo-e2e-ms", type=float, default=5000.0)
    parser.add_argument(
        "--tool", choices=("locust", "k6", "both"), default="locust", help="load generator"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rates = [float(r) for r in args.rates.split(",")]
    tools = ("locust", "k6") if args.tool == "both" else (args.tool,)
    for i, rate in enumerate(rates):
        # Tools alternate which goes first at each rate: neither always meets a warm cache.
        for tool in tools if i % 2 == 0 else tools[::-1]:
            print(f"[sweep {tool}] {rate:g} req/s for {args.seconds:g} s ...", flush=True)
            runner = run_rate if tool == "locust" else run_rate_k6
            runner(args.host, rate, args.users, args.seconds, args.out)
    slos = {"slo_ttft_ms": args.slo_ttft_ms, "slo_e2e_ms": args.slo_e2e_ms}
    if "locust" in tools:
        print(sweep_report(args.out, **slos))
    if "k6" in tools:
        print(sweep_report(Path(f"{args.out}-k6"), **slos))
    if len(tools) == 2:
        command = "python -m loadtests.sweep " + " ".join(sys.argv[1:] if argv is None else argv)
        text = (
            f"# locust and k6 at the same offered rates ({git_sha()})\n\n"
            f"Command: `{command}`; answered requests a second and the p95 of the "
            f"end-to-end time, each tool's run in turn on the same server.\n\n"
            f"{tools_table(args.out)}\n"
        )
        Path(f"{args.out}_tools.md").write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
