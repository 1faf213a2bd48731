"""``thinkgate calibrate auto``: measure every plan ``auto`` may choose on calibration
questions, and write the table it chooses from.

    thinkgate calibrate auto [--server URL | --model DIR] [--questions-file FILE] \\
        [--questions 24] [--parts ceilings,deadlines] [--deadlines 0.5,1] \\
        [--out strategies/auto_tables/testbed-base.json]

Two parts, on the same calibration questions (the first ``--questions`` of
``--questions-file``, JSONL of ``prompt`` or ``messages`` and ``answer``, by default the
file the installed default model offers: the testbed's validation split, 8-12
operations; never the test split, which the ``budgets`` benchmark holds out), at
temperature 1, seeded:

  ceilings   each plan of ``CALIBRATION_GRID`` (``elastic`` at thinking budgets 0-400,
             ``self-consistency`` at N = 2-16 with thinking 32-256) without limits, one
             question at a time, alone on the server: accuracy, mean completion tokens,
             the 90th percentile of the wall time (a short deadline's fallback, scaled
             by the engine's load at request time)
  deadlines  each plan of ``DEADLINE_GRID`` (plain, elastic, self-consistency, DeepConf,
             step rejection and particle filtering with the PRM) with
             ``budget.deadline_ms`` at each of ``DEADLINES``, at each of ``CROWDS``
             requests in flight: what the plan achieves when the deadline cuts it

``--parts`` measures only the named parts and keeps the other's rows from ``--out``;
``--deadlines`` measures only those deadlines and keeps the other deadlines' rows (each
row records how many questions it was measured on).
Without ``--server`` a thinkgate server is started on ``--model`` (default: the installed
default model) with ``--max-model-len`` (default 512, the context the shipped table was
calibrated at) and stopped after; its log goes to a temporary file named on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

from core import defaults
from server.calibrate.local_server import machine, thinkgate
from server.calibrate.plans import (
    CALIBRATION_GRID,
    CROWDS,
    DEADLINE_GRID,
    DEADLINES,
    FixedPlan,
    ask_all,
    summary,
)
from server.calibrate.questions import Question, QuestionsFileError, read_questions
from strategies.auto import DEFAULT_TABLE, AutoTable, PlanRow

_PARTS = ("ceilings", "deadlines")
# What a measurement returns: the served model's name and the rows measured.
_Measured = tuple[str, list[dict[str, Any]]]


async def measure(
    url: str,
    parts: Sequence[str],
    questions: Sequence[Question],
    seed: int,
    deadlines: Sequence[float] = DEADLINES,
) -> _Measured:
    """The served model's name and one row per plan (and deadline and crowd) measured."""
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    model = (await client.models.list()).data[0].id
    cells = _cells(parts, deadlines)
    rows: list[dict[str, Any]] = []
    bar = tqdm(
        total=len(cells) * len(questions), desc="plans x questions", unit="q", file=sys.stderr
    )
    for plan, deadline, crowd in cells:
        limits = {} if deadline is None else {"deadline_ms": int(deadline * 1000)}
        outcomes = await ask_all(client, model, questions, plan, limits, crowd, seed, bar)
        rows.append(_row(plan, deadline, crowd, summary(outcomes, deadline), len(questions)))
    bar.close()
    return model, rows


def _cells(
    parts: Sequence[str], deadlines: Sequence[float]
) -> list[tuple[FixedPlan, float | None, int]]:
    """(plan, deadline or None, requests in flight) of every measurement, in order."""
    cells: list[tuple[FixedPlan, float | None, int]] = []
    if "ceilings" in parts:
        cells += [(plan, None, 1) for plan in CALIBRATION_GRID]
    if "deadlines" in parts:
        cells += [(p, d, c) for c in CROWDS for d in deadlines for p in DEADLINE_GRID]
    return cells


def _row(
    plan: FixedPlan, deadline: float | None, crowd: int, s: dict[str, float], questions: int
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "strategy": plan.strategy,
        "samples": plan.samples,
        "thinking": plan.thinking,
        "accuracy": round(s["accuracy"], 4),
        "tokens": round(s["tokens"], 1),
        "seconds": round(s["p90_seconds"], 4),
        "questions": questions,
    }
    if deadline is not None:
        row |= {"deadline_s": deadline, "clients": crowd}
    return row


def _kept(
    path: Path, parts: Sequence[str], deadlines: Sequence[float] = DEADLINES
) -> list[dict[str, Any]]:
    """The rows not measured now (other parts, other deadlines), from the table already
    at ``path``, each saying how many questions it was measured on."""
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    measured = set(deadlines) if "deadlines" in parts else set()
    keep_ceilings = "ceilings" not in parts
    return [
        {**r, "questions": r.get("questions") or data.get("questions", 0)}
        for r in data["rows"]
        if (r.get("deadline_s") is not None and r["deadline_s"] not in measured)
        or (r.get("deadline_s") is None and keep_ceilings)
    ]


def _parser() -> argparse.ArgumentParser:
    first_line = (__doc__ or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="thinkgate calibrate auto", description=first_line)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--server", default=None, help="URL of a running thinkgate server")
    src.add_argument("--model", default=None, help="model directory to start a server on")
    p.add_argument(
        "--questions-file",
        type=Path,
        default=None,
        help="JSONL calibration questions (prompt or messages, and answer); default: the "
        "installed default model's",
    )
    p.add_argument("--questions", type=int, default=24, help="the first N questions of the file")
    p.add_argument("--seed", type=int, default=0, help="seeds the requests")
    p.add_argument("--parts", default=",".join(_PARTS), help="what to measure (the rest is kept)")
    p.add_argument(
        "--deadlines",
        default=",".join(f"{d:g}" for d in DEADLINES),
        help="deadlines in seconds to measure (the other deadlines' rows are kept)",
    )
    p.add_argument("--max-model-len", type=int, default=512, help="the started server's context")
    p.add_argument("--out", type=Path, default=DEFAULT_TABLE)
    return p


def _parts(p: argparse.ArgumentParser, raw: str) -> list[str]:
    parts = [x.strip() for x in raw.split(",") if x.strip()]
    unknown = sorted(set(parts) - set(_PARTS))
    if unknown or not parts:
        p.error(f"--parts: ceilings and/or deadlines, not {unknown or 'nothing'}")
    return parts


def _deadlines(p: argparse.ArgumentParser, raw: str) -> tuple[float, ...]:
    try:
        deadlines = tuple(float(x) for x in raw.split(",") if x.strip())
    except ValueError:
        p.error(f"--deadlines: seconds separated by commas, not {raw!r}")
    if not deadlines or min(deadlines) <= 0:
        p.error("--deadlines: at least one, each above 0")
    return deadlines


def _questions(
    p: argparse.ArgumentParser, given: Path | None, n: int
) -> tuple[Path, list[Question]]:
    """The file (``--questions-file``, else the installed default model's) and its first
    ``n`` questions."""
    if n < 1:
        p.error("--questions: at least 1")
    path = given
    if path is None:
        try:
            offered = defaults.installed().calibration_questions
        except defaults.NoDefaultModel as exc:
            p.error(f"--questions-file is required: {exc}")
        if offered is None:
            p.error("--questions-file is required: the installed defaults offer no questions")
        path = Path(offered)
    try:
        return path, read_questions(path, n)
    except QuestionsFileError as exc:
        p.error(f"--questions-file: {exc}")


def _measured_here(
    model_dir: Path, max_model_len: int, measuring: Callable[[str], Coroutine[Any, Any, _Measured]]
) -> _Measured:
    """``measuring(url)`` against a server started on ``model_dir`` for it."""
    # Not under the working tree: an installed thinkgate has no results folder.
    fd, name = tempfile.mkstemp(prefix="thinkgate-calibrate-auto-", suffix=".log")
    os.close(fd)
    log = Path(name)
    print(f"server log: {log}", file=sys.stderr)
    flags = (
        "--reward-model",
        "none",
        "--auto-table",
        "none",
        "--max-model-len",
        str(max_model_len),
    )
    with thinkgate(model_dir, *flags, log=log) as url:
        model, rows = asyncio.run(measuring(url))
    # A table names the model as clients do: the default model by its served name.
    try:
        offered = defaults.installed()
    except defaults.NoDefaultModel:
        return model, rows
    return (offered.served_name if offered.is_default_model(model_dir) else model), rows


def _model_dir(p: argparse.ArgumentParser, given: str | None) -> Path:
    if given:
        return Path(given)
    try:
        return Path(defaults.installed().model)
    except defaults.NoDefaultModel as exc:
        p.error(f"--model or --server is required: {exc}")


def _record(table: AutoTable, questions_file: Path, seed: int, took_s: float) -> dict[str, Any]:
    return {
        **table.as_json(),
        "calibration": {
            "questions_file": questions_file.name,
            "temperature": 1.0,
            "seed": seed,
            "seconds_are": "p90 wall time per question (alone, or at `clients` in flight)",
            "deadline_rows": "measured with budget.deadline_ms = deadline_s x 1000",
            "machine": machine(),
            "took_s": round(took_s, 1),
        },
    }


def _print_rows(rows: Sequence[dict[str, Any]]) -> None:
    for r in rows:
        under = f"d={r['deadline_s']}s c={r.get('clients', 1)} " if r.get("deadline_s") else ""
        print(
            f"{under}{r['strategy']:17s} N={r['samples']:<3d} t={r['thinking']!s:<4s} "
            f"acc={r['accuracy']:.3f} tokens={r['tokens']:7.1f} p90={r['seconds']:.3f}s"
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    t0 = time.perf_counter()
    parts = _parts(p, args.parts)
    deadlines = _deadlines(p, args.deadlines)
    questions_file, qs = _questions(p, args.questions_file, args.questions)
    model_dir = None if args.server else _model_dir(p, args.model)
    kept = _kept(args.out, parts, deadlines)

    def measuring(url: str) -> Coroutine[Any, Any, _Measured]:
        return measure(url, parts, qs, args.seed, deadlines)

    if model_dir is None:
        model, rows = asyncio.run(measuring(args.server))
    else:
        model, rows = _measured_here(model_dir, args.max_model_len, measuring)
    rows = sorted([*kept, *rows], key=lambda r: (r.get("deadline_s") or 0, r.get("clients", 1)))
    table = AutoTable(model=model, rows=tuple(PlanRow(**r) for r in rows), questions=len(qs))
    record = _record(table, questions_file, args.seed, time.perf_counter() - t0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print_rows(rows)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
