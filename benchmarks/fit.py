"""``thinkgate bench fit``: ``thinkgate fit`` on a workload other than the testbed's own
split, then its one judgment on the test part, as a user would run both.

The workload: ``--questions`` testbed test-split questions of 1-13 operations (uniform),
drawn with ``--seed`` (84 by default, a stream no other benchmark draws), written as a
workload file beside the results. The fit measures the deadline rows at one client
(``--deadlines``) in ``--minutes``; the judgment runs the first ``--judge-questions``
test questions with the fit's ``--judge-plans`` best fixed plans per deadline and
``auto``. The verdict's rule is the judgment's own (``server.calibrate.judge.RULE``),
stated before the run. Writes ``benchmarks/results/fit/<name>/`` (the profile, its
report and judgment) and ``benchmarks/results/fit/<name>.md`` (the command, the machine).

    .venv/bin/python -m benchmarks.fit [--minutes 20] [--judge-questions 300]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence

from benchmarks.out_paths import results_of
from server.calibrate.judge import RULE
from server.calibrate.local_server import machine
from testbed.task import make_questions


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="thinkgate bench fit", description=__doc__)
    p.add_argument("--name", default="testbed-mixed")
    p.add_argument("--questions", type=int, default=720)
    p.add_argument("--seed", type=int, default=84)
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--deadlines", default="0.5,1")
    p.add_argument("--judge-questions", type=int, default=300)
    p.add_argument("--judge-plans", type=int, default=3)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    out = results_of("fit")
    out.mkdir(parents=True, exist_ok=True)
    workload = out / f"{args.name}.jsonl"
    qs = make_questions("test", args.questions, seed=args.seed, min_ops=1, max_ops=13)
    workload.write_text(
        "".join(json.dumps({"prompt": q.prompt, "answer": str(q.answer)}) + "\n" for q in qs)
    )
    profile = out / args.name
    base = [sys.executable, "-m", "server.cli", "fit", "--workload", str(workload)]
    base += ["--out", str(profile)]
    t0 = time.time()
    fit_cmd = [
        *base,
        "--minutes",
        f"{args.minutes:g}",
        "--deadlines",
        args.deadlines,
        "--clients",
        "1",
    ]
    _run(fit_cmd)
    t1 = time.time()
    print(f"rule: {RULE}", file=sys.stderr, flush=True)
    judge_cmd = [*base, "--judge", "--limit", str(args.judge_questions)]
    judge_cmd += ["--judge-plans", str(args.judge_plans), "--ceilings", "300,1000"]
    _run(judge_cmd)
    t2 = time.time()
    given = " ".join(sys.argv[1:] if argv is None else argv)
    link = f"{args.name}/report.md"
    (out / f"{args.name}.md").write_text(
        f"# `thinkgate fit` on `{workload.name}`\n\n"
        f"Machine: {machine()}. Fit {(t1 - t0) / 60:.1f} min, judgment {(t2 - t1) / 60:.1f} min "
        "(each with its server's start).\n\n"
        f"    .venv/bin/python -m benchmarks.fit {given}\n\n"
        f"Fit: `{' '.join(fit_cmd[2:])}`  \nJudgment: `{' '.join(judge_cmd[2:])}`\n\n"
        f"Rule, stated before the judgment: {RULE}.\n\n"
        f"The profile, its report and the judgment: [{link}]({link}).\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
