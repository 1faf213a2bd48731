"""``thinkgate calibrate auto``: measure every plan ``auto`` may choose on calibration
questions, and write the table it chooses from.

    thinkgate calibrate auto [--server URL | --model DIR] [--questions 24] \\
        [--parts ceilings,deadlines] [--deadlines 0.5,1] \\
        [--out strategies/auto_tables/testbed-base.json]

Two parts, on the same calibration questions (the testbed's validation split, 8-12
operations, temperature 1, seeded; never the test split, which the ``budgets`` benchmark
holds out):

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
Without ``--server`` a thinkgate server is started on ``--model`` (default: the testbed
base model) and stopped after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.budget_plans import (
    CALIBRATION_GRID,
    CROWDS,
    DEADLINE_GRID,
    DEADLINES,
    FixedPlan,
    ask_all,
    summary,
)
from benchmarks.servers import ROOT, machine, thinkgate
from core import defaults
from strategies.auto import DEFAULT_TABLE, AutoTable, PlanRow
from testbed import model_path
from testbed.task import make_questions


async def measure(
    url: str,
    parts: Sequence[str],
    questions: int,
    seed: int,
    deadlines: Sequence[float] = DEADLINES,
) -> tuple[str, list[dict[str, Any]]]:
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    model = (await client.models.list()).data[0].id
    qs = make_questions("validation", questions, seed=seed, min_ops=8, max_ops=12)
    cells: list[tuple[FixedPlan, float | None, int]] = []
    if "ceilings" in parts:
        cells += [(plan, None, 1) for plan in CALIBRATION_GRID]
    if "deadlines" in parts:
        cells += [(p, d, c) for c in CROWDS for d in deadlines for p in DEADLINE_GRID]
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(cells) * len(qs), desc="plans x questions", unit="q", file=sys.stderr)
    for plan, deadline, crowd in cells:
        limits = {} if deadline is None else {"deadline_ms": int(deadline * 1000)}
        outcomes = await ask_all(client, model, qs, plan, limits, crowd, seed, bar)
        s = summary(outcomes, deadline)
        row: dict[str, Any] = {
            "strategy": plan.strategy,
            "samples": plan.samples,
            "thinking": plan.thinking,
            "accuracy": round(s["accuracy"], 4),
            "tokens": round(s["tokens"], 1),
            "seconds": round(s["p90_seconds"], 4),
            "questions": len(qs),
        }
        if deadline is not None:
            row |= {"deadline_s": deadline, "clients": crowd}
        rows.append(row)
    bar.close()
    return model, rows


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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="thinkgate calibrate auto", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--server", default=None, help="URL of a running thinkgate server")
    src.add_argument("--model", default=None, help="model directory to start a server on")
    p.add_argument("--questions", type=int, default=24, help="calibration questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--parts", default="ceilings,deadlines", help="what to measure (the rest is kept)"
    )
    p.add_argument(
        "--deadlines",
        default=",".join(f"{d:g}" for d in DEADLINES),
        help="deadlines in seconds to measure (the other deadlines' rows are kept)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_TABLE)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    t0 = time.perf_counter()
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = sorted(set(parts) - {"ceilings", "deadlines"})
    if unknown or not parts:
        p.error(f"--parts: ceilings and/or deadlines, not {unknown or 'nothing'}")
    try:
        deadlines = tuple(float(x) for x in args.deadlines.split(",") if x.strip())
    except ValueError:
        p.error(f"--deadlines: seconds separated by commas, not {args.deadlines!r}")
    if not deadlines or min(deadlines) <= 0:
        p.error("--deadlines: at least one, each above 0")
    kept = _kept(args.out, parts, deadlines)
    if args.server:
        model, rows = asyncio.run(measure(args.server, parts, args.questions, args.seed, deadlines))
    else:
        log = ROOT / "benchmarks" / "results" / "logs" / "calibrate-auto-server.log"
        directory = Path(args.model) if args.model else model_path("base")
        with thinkgate(directory, "--reward-model", "none", "--auto-table", "none", log=log) as url:
            model, rows = asyncio.run(measure(url, parts, args.questions, args.seed, deadlines))
    if not args.server:
        # A table names the model as clients do: the default model by its served name.
        offered = defaults.installed()
        if offered.is_default_model(directory):
            model = offered.served_name
    rows = sorted([*kept, *rows], key=lambda r: (r.get("deadline_s") or 0, r.get("clients", 1)))
    table = AutoTable(
        model=model,
        rows=tuple(PlanRow(**r) for r in rows),
        questions=args.questions,
    )
    record = {
        **table.as_json(),
        "calibration": {
            "split": "validation",
            "ops": [8, 12],
            "temperature": 1.0,
            "seed": args.seed,
            "seconds_are": "p90 wall time per question (alone, or at `clients` in flight)",
            "deadline_rows": "measured with budget.deadline_ms = deadline_s x 1000",
            "machine": machine(),
            "took_s": round(time.perf_counter() - t0, 1),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for r in rows:
        under = f"d={r['deadline_s']}s c={r.get('clients', 1)} " if r.get("deadline_s") else ""
        print(
            f"{under}{r['strategy']:17s} N={r['samples']:<3d} t={r['thinking']!s:<4s} "
            f"acc={r['accuracy']:.3f} tokens={r['tokens']:7.1f} p90={r['seconds']:.3f}s"
        )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
