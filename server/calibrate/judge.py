"""``thinkgate fit --judge``: the profile's one judgment, on the test part it never saw.

At each deadline of the profile's table (one request in flight) and each token ceiling
(``--ceilings``), ``auto`` (planning from the profile) and every fixed plan the table
measured there answer the same test questions, one at a time, seeded per question. The
rule, printed before the run and applied as printed:

* at a budget, ``auto`` is **non-inferior** to the plan the fit part ranked best there
  when the lower end of the paired 95% interval of (auto - that plan) is above
  -``MARGIN`` (3 points);
* across budgets, ``auto`` is **above** a fixed plan when the lower end of the paired
  interval of their per-question means over the budgets is above 0.

Intervals are over distinct questions (paired t). The result goes into
``judgments.json`` and ``report.md`` with the code version; judging the same profile on
the same test part again is marked a second look.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.calibrate import fit_run
from server.calibrate.fit_cells import Cell
from server.calibrate.fit_journal import Journal
from server.calibrate.fit_profile import code_version
from server.calibrate.plans import FixedPlan, Outcome
from server.calibrate.stats import paired, percentile
from server.calibrate.workload import Workload, WorkQuestion
from strategies.auto import PlanRow
from strategies.profile import PROFILE_FILE, TABLE_FILE, Profile

MARGIN = 0.03
AUTO = FixedPlan("auto")
CEILINGS = (300, 1000)
RULE = (
    f"non-inferior at a budget: lower end of the paired 95% interval of auto - (the fit's "
    f"best plan there) above -{MARGIN * 100:g} points; above a plan across budgets: lower "
    "end of the paired interval of per-question means over the budgets above 0"
)


@dataclass(frozen=True, slots=True)
class Budget:
    deadline_s: float | None
    tokens: int | None

    @property
    def name(self) -> str:
        return f"{self.deadline_s:g} s" if self.deadline_s is not None else f"{self.tokens} tokens"


def budgets(
    profile: Profile, ceilings: Sequence[int], best: int | None = None
) -> list[tuple[Budget, list[PlanRow]]]:
    """Each budget with the fixed plans the table measured for it, best first (the
    ``best`` first of them, where given: a judgment's time bound)."""
    out: list[tuple[Budget, list[PlanRow]]] = []
    alone = [r for r in profile.table.rows if r.deadline_s is not None and r.clients == 1]
    for d in sorted({r.deadline_s for r in alone if r.deadline_s is not None}):
        rows = sorted((r for r in alone if r.deadline_s == d), key=lambda r: -r.accuracy)
        out.append((Budget(d, None), rows[:best]))
    free = [r for r in profile.table.rows if r.deadline_s is None]
    for t in ceilings:
        rows = sorted((r for r in free if r.tokens * 1.2 <= t), key=lambda r: -r.accuracy)
        if rows:
            out.append((Budget(None, t), rows[:best]))
    return out


def _plan(r: PlanRow) -> FixedPlan:
    return FixedPlan(r.strategy, r.samples, r.thinking)


def _cells(b: Budget, rows: Sequence[PlanRow]) -> list[Cell]:
    return [Cell(p, b.deadline_s, 1, b.tokens) for p in (AUTO, *(_plan(r) for r in rows))]


async def judging(client: Any, args: argparse.Namespace, workload: Workload) -> str:
    """The judgment's report section (also written into the profile)."""
    from tqdm import tqdm

    code = code_version()  # at the start: the checkout may change while it runs
    profile = Profile.load(args.out)
    doc = json.loads((args.out / PROFILE_FILE).read_text())
    if doc["workload"]["sha256"] != workload.sha256:
        from server.calibrate.fit import FitError

        raise FitError("the workload is not the one the profile was fitted on")
    test_ids = set(doc["split"]["test_ids"])
    test = [q for q in workload.questions if q.id in test_ids][: args.limit]
    plan = budgets(profile, args.ceilings, args.judge_plans)
    print(f"rule: {RULE}", file=sys.stderr)
    from server.calibrate.fit import served

    model, _ = await served(client)
    journal = Journal(args.out / "judge")
    bar = tqdm(total=len(test), desc="judge", unit="q", file=sys.stderr)
    run = fit_run.Run(client, model, tuple(test), journal, args.seed + 1, float("inf"), bar)
    try:
        if workload.label_free:
            test = await fit_run.consensus(run, test)
        bar.total += len(test) * sum(len(rows) + 1 for _, rows in plan)
        for b, rows in plan:
            for cell in _cells(b, rows):
                await fit_run.measure_cell(run, cell.key, cell, test)
    finally:
        bar.close()
        journal.close()
    entry = _entry(args.out, profile, run, plan, test, workload.label_free, code)
    return _record(args.out, entry)


def _scores(run: fit_run.Run, cell: Cell, test: Sequence[WorkQuestion]) -> list[Outcome]:
    return run.journal.of(cell.key, [q.id for q in test])


def _entry(
    out: Path,
    profile: Profile,
    run: fit_run.Run,
    plan: Sequence[tuple[Budget, Sequence[PlanRow]]],
    test: Sequence[WorkQuestion],
    label_free: bool,
    code: str,
) -> dict[str, Any]:
    cells: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    per_plan: dict[str, list[list[bool]]] = {}
    for b, rows in plan:
        auto_cell, *fixed = _cells(b, rows)
        auto = [o.right and not o.late for o in _scores(run, auto_cell, test)]
        per_plan.setdefault("auto", []).append(auto)
        cells.append(_cell_line(b, "auto", _scores(run, auto_cell, test), None))
        for i, cell in enumerate(fixed):
            outs = _scores(run, cell, test)
            mine = [o.right and not o.late for o in outs]
            per_plan.setdefault(cell.plan.label, []).append(mine)
            diff = paired(auto, mine)
            cells.append(_cell_line(b, cell.plan.label, outs, diff))
            if i == 0:  # the fit part's best plan at this budget
                verdicts.append(
                    {
                        "budget": b.name,
                        "against": cell.plan.label,
                        "diff": diff,
                        "non_inferior": diff[1] > -MARGIN,
                    }
                )
    return {
        "code": code,
        "profile_digest": _digest(out),
        "test_ids_digest": hashlib.sha256(",".join(q.id for q in test).encode()).hexdigest()[:16],
        "questions": len(test),
        "label_free": label_free,
        "rule": RULE,
        "cells": cells,
        "at_each_budget": verdicts,
        "across_budgets": _across(per_plan),
        "profile": profile.name,
    }


def _cell_line(
    b: Budget, plan: str, outs: Sequence[Outcome], diff: tuple[float, float, float] | None
) -> dict[str, Any]:
    n = max(1, len(outs))
    return {
        "budget": b.name,
        "plan": plan,
        "accuracy": sum(1 for o in outs if o.right and not o.late) / n,
        "answered": sum(1 for o in outs if o.answered and not o.late) / n,
        "p95_s": percentile([o.seconds for o in outs], 0.95),
        "tokens": sum(o.tokens for o in outs) / n,
        "auto_minus_plan": None if diff is None else list(diff),
    }


def _across(per_plan: dict[str, list[list[bool]]]) -> list[dict[str, Any]]:
    """auto against each plan over the budgets both ran: per question, the mean of its
    outcomes over those budgets, paired."""
    out = []
    auto = per_plan.get("auto", [])
    for label, runs in per_plan.items():
        if label == "auto" or len(runs) != len(auto) or not runs:
            continue
        mean_auto = [sum(col) / len(col) for col in zip(*auto, strict=True)]
        mean_plan = [sum(col) / len(col) for col in zip(*runs, strict=True)]
        d = paired(mean_auto, mean_plan)
        out.append({"against": label, "diff": d, "above": d[1] > 0})
    return out


def _digest(out: Path) -> str:
    h = hashlib.sha256((out / TABLE_FILE).read_bytes())
    h.update(json.dumps(json.loads((out / PROFILE_FILE).read_text())["constants"]).encode())
    return h.hexdigest()[:16]


def _record(out: Path, entry: dict[str, Any]) -> str:
    path = out / "judgments.json"
    earlier: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
    entry["second_look"] = any(
        e["profile_digest"] == entry["profile_digest"]
        and e["test_ids_digest"] == entry["test_ids_digest"]
        for e in earlier
    )
    path.write_text(json.dumps([*earlier, entry], indent=1) + "\n")
    section = render(entry)
    with (out / "report.md").open("a") as f:
        f.write("\n" + section)
    return section


def render(entry: dict[str, Any]) -> str:
    score = "agreement with consensus" if entry["label_free"] else "accuracy"
    look = " (a second look: this profile was judged on these questions before)"
    lines = [
        f"## Judgment{look if entry['second_look'] else ''}",
        "",
        f"{entry['questions']} distinct test questions, code {entry['code']}. Rule, stated "
        f"before the run: {entry['rule']}.",
        "",
        f"| budget | plan | {score} | answered | p95 s | tokens | auto - plan [95%] |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in entry["cells"]:
        d = c["auto_minus_plan"]
        diff = "" if d is None else f"{d[0] * 100:+.1f} [{d[1] * 100:+.1f}, {d[2] * 100:+.1f}]"
        lines.append(
            f"| {c['budget']} | {c['plan']} | {c['accuracy']:.3f} | {c['answered']:.3f} | "
            f"{c['p95_s']:.2f} | {c['tokens']:.0f} | {diff} |"
        )
    lines += ["", "Verdicts:"]
    for v in entry["at_each_budget"]:
        ok = "non-inferior" if v["non_inferior"] else "NOT shown non-inferior"
        lines.append(f"- {v['budget']}: auto vs the fit's best ({v['against']}): {ok}")
    for v in entry["across_budgets"]:
        ok = "above" if v["above"] else "not shown above"
        lines.append(f"- across budgets, auto vs {v['against']}: {ok}")
    return "\n".join(lines) + "\n"
