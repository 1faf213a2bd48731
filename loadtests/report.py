"""Turn locust's output into reports: one run's table, or a rate sweep's load report.

    python -m loadtests.report runs/locust           # reads runs/locust_stats.csv
    python -m loadtests.report --sweep runs/sweep    # reads runs/sweep-r<rate>.jsonl

One run: ``<prefix>_report.md`` and ``<prefix>_latency.png`` beside the CSVs. A sweep
(``loadtests.sweep``): per offered rate, the achieved rate, TTFT, time to first answer
token (TTFO), inter-token latency and end-to-end latency (p50/p90/p99), reasoning and
answer tokens, and goodput (requests a second meeting every SLO) with its knee (the
highest offered rate whose goodput is still 90% of it); ``<prefix>_sweep.md``,
``<prefix>_latency.png`` and ``<prefix>_goodput.png``.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Stat:
    name: str
    requests: int
    failures: int
    p50_ms: float
    p99_ms: float
    rps: float


def read_stats(prefix: Path) -> list[Stat]:
    rows = []
    with Path(f"{prefix}_stats.csv").open() as f:
        for r in csv.DictReader(f):
            if r["Name"] == "Aggregated":
                continue
            rows.append(
                Stat(
                    name=r["Name"],
                    requests=int(r["Request Count"]),
                    failures=int(r["Failure Count"]),
                    p50_ms=float(r["50%"] or 0),
                    p99_ms=float(r["99%"] or 0),
                    rps=float(r["Requests/s"] or 0),
                )
            )
    return rows


def git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def render(stats: list[Stat]) -> str:
    lines = [
        "| request | count | failures | p50 ms | p99 ms | req/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {s.name} | {s.requests} | {s.failures} | {s.p50_ms:.0f} | {s.p99_ms:.0f} | "
        f"{s.rps:.2f} |"
        for s in stats
    ]
    return "\n".join(lines)


def plot(stats: list[Stat], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(stats))
    ax.bar([x - 0.2 for x in xs], [s.p50_ms for s in stats], width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [s.p99_ms for s in stats], width=0.4, label="p99")
    ax.set_xticks(list(xs), [s.name for s in stats], rotation=20, fontsize=8)
    ax.set_ylabel("latency (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --- a rate sweep

LATENCIES = (("ttft_ms", "TTFT"), ("ttfo_ms", "TTFO"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"))
KNEE_SHARE = 0.9


def percentile(values: Sequence[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True, slots=True)
class RatePoint:
    offered: float
    achieved: float
    goodput: float
    requests: int
    failures: int
    latency: dict[str, dict[str, float | None]]  # metric -> p50/p90/p99
    reasoning_tokens: float | None
    answer_tokens: float | None
    users: int | None = None  # locust users of this rate's run (its concurrency cap)


def meta_path(records: Path) -> Path:
    """The settings a rate's run was recorded with, beside its records."""
    return records.with_name(records.name.removesuffix(".jsonl") + ".meta.json")


def read_sweep(prefix: Path) -> list[dict[str, Any]]:
    """(offered rate, records, meta) per ``<prefix>-r<rate>.jsonl``, by rate; meta is
    what ``loadtests.sweep`` wrote beside the records (users, seconds, git), or {}."""
    found = []
    for path in prefix.parent.glob(f"{prefix.name}-r*.jsonl"):
        m = re.fullmatch(re.escape(prefix.name) + r"-r([0-9.]+)\.jsonl", path.name)
        if m:
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            meta = meta_path(path)
            found.append(
                {
                    "rate": float(m.group(1)),
                    "records": rows,
                    "meta": json.loads(meta.read_text()) if meta.exists() else {},
                }
            )
    return sorted(found, key=lambda x: x["rate"])


def rate_point(
    rate: float,
    rows: list[dict[str, Any]],
    slo_ttft_ms: float,
    slo_e2e_ms: float,
    users: int | None = None,
) -> RatePoint:
    ts = [r["t"] for r in rows]
    span = max(ts) - min(ts) if len(ts) > 1 else 1.0
    ok = [r for r in rows if r.get("ok")]

    def meets(r: dict[str, Any]) -> bool:
        ttft = r.get("ttft_ms")
        return (r.get("e2e_ms") or 0.0) <= slo_e2e_ms and (ttft is None or ttft <= slo_ttft_ms)

    latency = {}
    for key, label in LATENCIES:
        vals = [float(r[key]) for r in ok if r.get(key) is not None]
        latency[label] = {f"p{q}": percentile(vals, q / 100) for q in (50, 90, 99)}

    def mean(key: str) -> float | None:
        vals = [float(r[key]) for r in ok if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    reasoning, completion = mean("reasoning_tokens"), mean("completion_tokens")
    return RatePoint(
        offered=rate,
        achieved=len(ok) / span,
        goodput=sum(1 for r in ok if meets(r)) / span,
        requests=len(rows),
        failures=len(rows) - len(ok),
        latency=latency,
        reasoning_tokens=reasoning,
        answer_tokens=None if completion is None or reasoning is None else completion - reasoning,
        users=users,
    )


def knee(points: Sequence[RatePoint]) -> float | None:
    """The highest offered rate whose goodput still reaches KNEE_SHARE of it."""
    good = [p.offered for p in points if p.goodput >= KNEE_SHARE * p.offered]
    return max(good) if good else None


def knee_text(points: Sequence[RatePoint]) -> str:
    """The knee in words: a knee at the sweep's highest rate is no knee found (the server
    may hold far above it), so the report says so instead of naming that rate."""
    k = knee(points)
    if k is None:
        return "below the lowest rate"
    if k == max(p.offered for p in points):
        return f"not reached: goodput held at every rate up to {k:g} req/s (sweep higher rates)"
    return f"{k:g} req/s"


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:.0f}"


def render_sweep(points: Sequence[RatePoint], slo_ttft_ms: float, slo_e2e_ms: float) -> str:
    lines = [
        f"SLOs: TTFT <= {slo_ttft_ms:.0f} ms (streams), end-to-end <= {slo_e2e_ms:.0f} ms. "
        f"Knee (goodput >= {KNEE_SHARE:.0%} of the offered rate): " + knee_text(points) + ".",
        "",
        "| offered req/s | users | achieved | goodput | failures | "
        + " | ".join(f"{label} p50/p90/p99 ms" for _, label in LATENCIES)
        + " | reasoning tok | answer tok |",
        "|" + "---:|" * (5 + len(LATENCIES) + 2),
    ]
    for p in points:
        users = "" if p.users is None else str(p.users)
        cells = [f"{p.offered:g}", users, f"{p.achieved:.2f}", f"{p.goodput:.2f}", str(p.failures)]
        for _, label in LATENCIES:
            q = p.latency[label]
            # A tool that did not measure it (k6 reads responses whole: no TTFT) says so.
            missing = all(q[k] is None for k in ("p50", "p90", "p99"))
            cells.append("n/a" if missing else "/".join(_ms(q[k]) for k in ("p50", "p90", "p99")))
        cells += [
            "" if p.reasoning_tokens is None else f"{p.reasoning_tokens:.1f}",
            "" if p.answer_tokens is None else f"{p.answer_tokens:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_sweep(points: Sequence[RatePoint], prefix: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [p.offered for p in points]
    fig, axes = plt.subplots(1, len(LATENCIES), figsize=(4 * len(LATENCIES), 3.4))
    for ax, (_, label) in zip(axes, LATENCIES, strict=True):
        for q in ("p50", "p90", "p99"):
            ys = [p.latency[label][q] for p in points]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=q)
        ax.set_title(label)
        ax.set_xlabel("offered req/s")
        ax.set_ylabel("ms")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(f"{prefix}_latency.png", dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.plot(xs, xs, linestyle=":", color="grey", label="offered")
    ax.plot(xs, [p.achieved for p in points], marker="o", label="achieved")
    ax.plot(xs, [p.goodput for p in points], marker="s", label="goodput (SLOs met)")
    if (k := knee(points)) is not None and k < max(xs):
        ax.axvline(k, color="red", linestyle="--", label=f"knee {k:g} req/s")
    ax.set_xlabel("offered req/s")
    ax.set_ylabel("req/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}_goodput.png", dpi=110)
    plt.close(fig)


def sweep_report(prefix: Path, *, slo_ttft_ms: float, slo_e2e_ms: float) -> str:
    runs = read_sweep(prefix)
    if not runs:
        raise SystemExit(f"no {prefix}-r<rate>.jsonl records")
    points = [
        rate_point(r["rate"], r["records"], slo_ttft_ms, slo_e2e_ms, r["meta"].get("users"))
        for r in runs
    ]
    plot_sweep(points, prefix)
    # The code the runs were recorded with (the report may be rendered later).
    recorded = sorted({str(r["meta"]["git"]) for r in runs if "git" in r["meta"]})
    sha = ", ".join(recorded) if recorded else git_sha()
    text = (
        f"# Load sweep ({sha})\n\n{render_sweep(points, slo_ttft_ms, slo_e2e_ms)}\n\n"
        f"![latency]({prefix.name}_latency.png)\n\n![goodput]({prefix.name}_goodput.png)\n"
    )
    Path(f"{prefix}_sweep.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--sweep":
        print(sweep_report(Path(args[1]), slo_ttft_ms=1000.0, slo_e2e_ms=5000.0))
        return 0
    if len(args) != 1:
        print("usage: python -m loadtests.report [--sweep] PREFIX", file=sys.stderr)
        return 2
    prefix = Path(args[0])
    stats = read_stats(prefix)
    plot(stats, Path(f"{prefix}_latency.png"))
    text = (
        f"# Load test ({git_sha()})\n\n{render(stats)}\n\n![latency]({prefix.name}_latency.png)\n"
    )
    Path(f"{prefix}_report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
