"""Writing a profile directory (``strategies.profile`` reads it): ``profile.json``,
``auto-table.json``, ``report.md`` and its plot, ``accuracy.png``."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from server.calibrate.fit_cells import Cell, Speeds
from server.calibrate.fit_pets import PetsFit
from server.calibrate.fit_stop import StopFit
from server.calibrate.split import RULE, Split
from server.calibrate.workload import Workload
from strategies.auto import AutoTable, PlanRow
from strategies.profile import FORMAT, PROFILE_FILE, TABLE_FILE

PLOT_FILE = "accuracy.png"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fitted:
    """Everything a fit measured, as the profile records it."""

    name: str
    model: str
    tokenizer: str
    workload: Workload
    split: Split
    rows: tuple[dict[str, Any], ...]
    speeds: Speeds
    answer_reserve: int
    pets: PetsFit
    stop: StopFit
    questions: int  # per row (the questions every cell finished)
    left_out: tuple[Cell, ...]  # cells the time did not afford
    refused: dict[str, str]  # strategies the server does not run, with its answer
    complete: bool  # False: the clock ran out before the schedule's last round
    minutes: float
    took_s: float
    machine: str
    seed: int
    code: str  # the code version that measured it, taken when the run started


def code_version() -> str:
    """The package version, and the git commit where the code is a checkout."""
    try:
        v = version("thinkgate")
    except PackageNotFoundError:
        v = "unknown"
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return v
    return f"{v}+{sha}" if sha else v


def write(out: Path, f: Fitted) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table = AutoTable(
        model=f.model,
        rows=tuple(PlanRow(**r) for r in f.rows),
        questions=f.questions,
        stop_confidence=f.stop.confidence if f.stop.chosen_by == "fit" else None,
    )
    (out / TABLE_FILE).write_text(json.dumps(table.as_json(), indent=1) + "\n")
    doc = {
        "format": FORMAT,
        "name": f.name,
        "model": f.model,
        "tokenizer": f.tokenizer,
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code": f.code,
        "workload": {
            "file": f.workload.path.name,
            "sha256": f.workload.sha256,
            "questions": len(f.workload.questions),
            "repeated_lines": f.workload.repeated,
            "label_free": f.workload.label_free,
        },
        "split": {
            "rule": RULE,
            "test_share": f.split.test_share,
            "fit_ids": list(f.split.fit_ids),
            "test_ids": list(f.split.test_ids),
        },
        "constants": {
            "answer_reserve": f.answer_reserve,
            "answer_tokens_mean": round(f.speeds.answer_tokens, 1),
            "seconds_per_token": {
                "1": round(f.speeds.alone, 6),
                str(f.speeds.crowd): round(f.speeds.crowded, 6),
            },
        },
        "auto_table": TABLE_FILE,
        "stop_rule": {
            "rule": "beta",
            "confidence": f.stop.confidence,
            "chosen_by": f.stop.chosen_by,
            "pools": f.stop.pools,
            "candidates": [asdict(c) for c in f.stop.candidates],
        },
        "pets_table": f.pets.table,
        "pets": {
            "questions": f.pets.questions,
            "pool": f.pets.pool,
            "left_out": f.pets.reason,
        },
        "fit": {
            "minutes": f.minutes,
            "took_s": round(f.took_s, 1),
            "questions_per_row": f.questions,
            "complete": f.complete,
            "cells": len(f.rows),
            "left_out_for_time": [c.key for c in f.left_out],
            "refused_strategies": f.refused,
            "machine": f.machine,
            "seed": f.seed,
            "temperature": 1.0,
        },
    }
    (out / PROFILE_FILE).write_text(json.dumps(doc, indent=1) + "\n")
    plotted = _plot(out / PLOT_FILE, f.rows, f.workload.label_free)
    (out / "report.md").write_text(report(f, plotted))


def _score(label_free: bool) -> str:
    return "agreement with consensus" if label_free else "accuracy"


def report(f: Fitted, plotted: bool) -> str:
    score = _score(f.workload.label_free)
    lines = [
        f"# Profile `{f.name}`: {f.model} on `{f.workload.path.name}`",
        "",
        f"Fitted in {f.took_s / 60:.1f} min of {f.minutes:g} ({f.machine}), temperature 1, "
        f"seed {f.seed}. Fit part {len(f.split.fit_ids)} questions, test part "
        f"{len(f.split.test_ids)} (held out: `thinkgate fit --judge` runs it once).",
        "",
        f"Each row: {score} over the same {f.questions} fit questions (95% Wilson "
        "interval), mean completion tokens, the 90th percentile of seconds per question.",
    ]
    if f.workload.label_free:
        lines += [
            "",
            "The workload has no answers: a 16-sample vote's answer stands in for each "
            "question's, so every figure is agreement with that consensus, not accuracy.",
        ]
    if not f.complete:
        lines += ["", "The clock ran out before the last round: rows count finished questions."]
    lines += [
        "",
        f"Answer length after thinking: mean {f.speeds.answer_tokens:.1f} tokens, reserve "
        f"(90th percentile) {f.answer_reserve}. Decode: {f.speeds.alone * 1000:.2f} ms per "
        f"token per row alone, {f.speeds.crowded * 1000:.2f} at {f.speeds.crowd} in flight.",
        "",
        f"| plan | deadline | clients | {score} | 95% interval | tokens | p90 s | questions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in f.rows:
        d = "none" if r.get("deadline_s") is None else f"{r['deadline_s']:g} s"
        label = row_label(r)
        lines.append(
            f"| {label} | {d} | {r.get('clients', 1)} | {r['accuracy']:.3f} | "
            f"[{r['low']:.3f}, {r['high']:.3f}] | {r['tokens']:.1f} | {r['seconds']:.3f} | "
            f"{r['questions']} |"
        )
    if f.left_out:
        lines += [
            "",
            f"Left out for time: {len(f.left_out)} cells, the least informative ones "
            "(`fit.left_out_for_time` in profile.json names them): more `--minutes` "
            "measures them.",
        ]
    if f.refused:
        lines += [
            "",
            "Not run by this server: " + ", ".join(f"{k} ({v})" for k, v in f.refused.items()),
        ]
    lines += ["", _pets_line(f.pets), "", *_stop_lines(f.stop)]
    if plotted:
        lines += ["", f"![{score} by deadline]({PLOT_FILE})"]
    return "\n".join(lines) + "\n"


def _stop_lines(s: StopFit) -> list[str]:
    if s.chosen_by != "fit":
        why = "no PETS pools" if not s.candidates else "no candidate agreed often enough"
        return [f"Stop rule: the default confidence {s.confidence} ({why})."]
    lines = [
        f"Stop rule: `auto`'s staged votes stop at confidence {s.confidence}, the lowest "
        f"whose stopped answers agree with the whole 16-sample draw's on {s.pools} fit "
        "questions' pools (replayed, at least 99% agreeing):",
        "",
        "| confidence | agreement | samples | accuracy |",
        "|---|---|---|---|",
    ]
    for c in s.candidates:
        lines.append(f"| {c.confidence} | {c.agreement:.3f} | {c.samples:.1f} | {c.accuracy:.3f} |")
    return lines


def _pets_line(p: PetsFit) -> str:
    if p.table is None:
        return f"PETS table: left out ({p.reason}); `pets` then samples adaptively."
    return (
        f"PETS table (`{p.table}`): fitted on pools of {p.pool} samples of {p.questions} "
        "fit questions; `pets` and PETS batches allocate by it under this profile."
    )


def row_label(r: dict[str, Any]) -> str:
    t = "" if r.get("thinking") is None else f" t={r['thinking']}"
    n = "" if r["samples"] == 1 else f"@{r['samples']}"
    return f"{r['strategy']}{n}{t}"


def _plot(path: Path, rows: Sequence[dict[str, Any]], label_free: bool) -> bool:
    """Each plan's score by deadline at one request in flight, with its interval."""
    alone = [r for r in rows if r.get("deadline_s") is not None and r.get("clients", 1) == 1]
    if not alone:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(row_label(r) for r in alone):
        mine = sorted((r for r in alone if row_label(r) == label), key=lambda r: r["deadline_s"])
        xs = [r["deadline_s"] for r in mine]
        ys = [r["accuracy"] for r in mine]
        err = [[r["accuracy"] - r["low"] for r in mine], [r["high"] - r["accuracy"] for r in mine]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("deadline (s)")
    ax.set_ylabel(_score(label_free))
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
