"""``thinkgate calibrate auto``: measure every plan ``auto`` may choose on calibration
questions, and write the table it chooses from.

    thinkgate calibrate auto [--server URL | --model DIR] [--questions 24] \\
        [--out strategies/auto_tables/testbed-base.json]

Each plan of the grid (``elastic`` at thinking budgets 0-400, ``self-consistency`` at
N = 2-16 with thinking 32-256) answers the same calibration questions (the testbed's
validation split, 8-12 operations, temperature 1, seeded) one at a time, alone on the
server; per plan the table keeps its accuracy, mean completion tokens and the 90th
percentile of its wall time (what a deadline must allow; ``auto`` scales it by the
engine's load at request time). Questions are never the test split, which the
``budgets`` benchmark holds out. Without ``--server`` a thinkgate server is started on
``--model`` (default: the testbed base model) and stopped after.
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

from benchmarks.budget_plans import CALIBRATION_GRID, FixedPlan, ask, summary
from benchmarks.servers import ROOT, machine, thinkgate
from core import defaults
from strategies.auto import DEFAULT_TABLE, AutoTable, PlanRow
from testbed import model_path
from testbed.task import make_questions


async def measure(
    url: str, plans: Sequence[FixedPlan], questions: int, seed: int
) -> tuple[str, list[dict[str, Any]]]:
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    model = (await client.models.list()).data[0].id
    qs = make_questions("validation", questions, seed=seed, min_ops=8, max_ops=12)
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(plans) * len(qs), desc="plans x questions", unit="q", file=sys.stderr)
    for plan in plans:
        outcomes = []
        for i, q in enumerate(qs):
            outcomes.append(await ask(client, model, q, plan, {}, seed=seed * 1000 + i))
            bar.update(1)
        s = summary(outcomes)
        rows.append(
            {
                "strategy": plan.strategy,
                "samples": plan.samples,
                "thinking": plan.thinking or 0,
                "accuracy": round(s["accuracy"], 4),
                "tokens": round(s["tokens"], 1),
                "seconds": round(s["p90_seconds"], 4),
            }
        )
    bar.close()
    return model, rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="thinkgate calibrate auto", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--server", default=None, help="URL of a running thinkgate server")
    src.add_argument("--model", default=None, help="model directory to start a server on")
    p.add_argument("--questions", type=int, default=24, help="calibration questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_TABLE)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    t0 = time.perf_counter()
    if args.server:
        model, rows = asyncio.run(measure(args.server, CALIBRATION_GRID, args.questions, args.seed))
    else:
        log = ROOT / "benchmarks" / "results" / "logs" / "calibrate-auto-server.log"
        directory = Path(args.model) if args.model else model_path("base")
        with thinkgate(directory, "--reward-model", "none", "--auto-table", "none", log=log) as url:
            model, rows = asyncio.run(measure(url, CALIBRATION_GRID, args.questions, args.seed))
    if not args.server:
        # A table names the model as clients do: the default model by its served name.
        offered = defaults.installed()
        if offered.is_default_model(directory):
            model = offered.served_name
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
            "seconds_are": "p90 wall time per question, alone on the server",
            "machine": machine(),
            "took_s": round(time.perf_counter() - t0, 1),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for r in rows:
        print(
            f"{r['strategy']:17s} N={r['samples']:<3d} t={r['thinking']:<4d} "
            f"acc={r['accuracy']:.3f} tokens={r['tokens']:7.1f} p90={r['seconds']:.3f}s"
        )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
