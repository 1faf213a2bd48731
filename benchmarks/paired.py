"""Tables for A B A B runs: each run's figures, then B / A per pair (median and range)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.servers import machine


def run_rows(runs: Sequence[Mapping[str, Any]], keys: Sequence[str], label: str) -> list[str]:
    """A markdown table, one row per run, its ``label`` figure after the run's number."""
    lines = [
        f"| run | {label} | " + " | ".join(keys) + " |",
        "|---|---|" + "---|" * len(keys),
    ]
    for i, r in enumerate(runs, 1):
        cells = " | ".join(f"{r[k]:.2f}" for k in keys)
        value = r[label]
        shown = f"{value:g}" if isinstance(value, int | float) else str(value)
        lines.append(f"| {i} | {shown} | {cells} |")
    return lines


def ratio_rows(
    runs: Sequence[Mapping[str, Any]], keys: Sequence[str], better: Mapping[str, str] | None = None
) -> list[str]:
    """A markdown table of the paired ratios (second run of a pair over the first)."""
    better = better or {}
    lines = [
        "| figure | better | median | min | max |" if better else "| figure | median | min | max |",
        "|---|---|---|---|---|" if better else "|---|---|---|---|",
    ]
    for k in keys:
        ratios = [b[k] / a[k] for a, b in zip(runs[0::2], runs[1::2], strict=True) if a[k] > 0]
        if not ratios:
            continue
        med, lo, hi = statistics.median(ratios), min(ratios), max(ratios)
        side = f" {better.get(k, '')} |" if better else ""
        lines.append(f"| {k} |{side} {med:.2f} | {lo:.2f} | {hi:.2f} |")
    return lines


def save(text: str, runs: Sequence[Mapping[str, Any]], md: Path, raw: Path) -> None:
    """Write the report and the runs behind it (with the machine), and print the report."""
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    raw.write_text(json.dumps({"machine": machine(), "runs": list(runs)}, indent=2) + "\n")
    print(text)


def ratio_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """Paired runs' typical ratio (geometric mean) and its 95% interval: a t interval on
    the log ratios, each ratio pairing two sides run minutes apart (a block of the same
    questions, a repeat of the same work), so that the machine's drift between pairs is
    in the spread. With one pair: no interval (nan)."""
    logs = [math.log(r) for r in ratios if r > 0]
    if not logs:
        return math.nan, math.nan, math.nan
    m = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(m), math.nan, math.nan
    from scipy.stats import t

    half = float(t.ppf(0.975, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - half), math.exp(m + half)
