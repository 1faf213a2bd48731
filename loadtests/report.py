"""Turn locust's CSV stats into a markdown table and a latency plot.

    python -m loadtests.report runs/locust    # reads runs/locust_stats.csv

Writes ``<prefix>_report.md`` and ``<prefix>_latency.png`` beside the CSVs.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m loadtests.report CSV_PREFIX", file=sys.stderr)
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
