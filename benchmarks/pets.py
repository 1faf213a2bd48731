"""PETS benchmark on the testbed, in the paper's protocol (docs/specs.md §4).

    python benchmarks/pets.py pools   # draw 64-sample pools once (HTTP API), cache them
    python benchmarks/pets.py sweep   # simulate uniform / online / offline on the pools
    python benchmarks/pets.py micro   # ms per OKG allocation round for 1,000 questions
    python benchmarks/pets.py live    # the same methods through the HTTP API (pets_live.py)
    python benchmarks/pets.py all     # pools, sweep, micro (live is separate: ~10 min)

Pools: calibration questions from the train split (the shipped table's questions),
evaluation questions from the test split (they never overlap), each with a pool of 64
samples at temperature 1, drawn through a thinkgate server's HTTP API (strategy
``plain``, ``n = 64``; ``--via local`` uses an in-process vLLM engine instead) on
``testbed/models/base`` and cached in ``benchmarks/results/pets/``.
Sweep: per run every pool is shuffled; the consistency label is the shuffled pool's
majority. Uniform takes a prefix of B; PETS online uses a table calibrated on the
train pools for each average budget; PETS offline runs OKG over the whole test set.
Writes ``benchmarks/results/pets/pets.md``, ``pets.json`` and ``pets.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.out_paths import LOGS, results_of  # noqa: E402
from strategies.pets.calibration.calibrate import build_table, fit_pools  # noqa: E402
from strategies.pets.calibration.pools import (  # noqa: E402
    Item,
    PoolRecord,
    Sampling,
    draw_http,
    draw_local,
    load_items,
    load_pools,
    save_pools,
)
from strategies.pets.calibration.simulate import Outcome, Pool, offline, online, uniform  # noqa: E402
from strategies.pets.okg import OkgAllocator, OkgConfig  # noqa: E402

RESULTS = results_of("pets")
MODEL = ROOT / "testbed" / "models" / "base"
CALIBRATION_QUESTIONS = ROOT / "strategies" / "pets" / "tables" / "testbed-train-questions.jsonl"
UNIFORM_BUDGETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
PETS_BUDGETS = (4, 5, 6, 8, 10, 12, 16, 20, 24, 26, 28, 30, 32, 34, 36, 38, 40, 44, 48, 56, 64)


def _pool_path(split: str) -> Path:
    return RESULTS / f"pools-{split}.jsonl"


def _cmd_pools(args: argparse.Namespace) -> None:
    """Draw the pools that are not cached yet (resumable: saved per chunk of questions)."""
    from testbed.task import make_questions

    sets = {
        "train": load_items(CALIBRATION_QUESTIONS)[: args.calibration],
        "test": [
            Item(messages=({"role": "user", "content": q.prompt},), gold=str(q.answer))
            for q in make_questions("test", args.test, seed=12)
        ],
    }
    todo: list[tuple[str, Item]] = []
    for split, items in sets.items():
        have = len(load_pools(_pool_path(split))) if _pool_path(split).exists() else 0
        todo += [(split, item) for item in items[have:]]
    if not todo:
        return
    started = time.perf_counter()
    queue = list(todo)

    def save(records: list[PoolRecord]) -> None:
        for record in records:
            split, _ = queue.pop(0)
            save_pools(_pool_path(split), [record], append=True)

    sampling = Sampling(pool=args.pool, seed=0)
    items = [it for _, it in todo]
    records: list[PoolRecord] = []
    if args.via == "local":
        records = draw_local(args.model, items, sampling, on_chunk=save)
    else:
        from tqdm import tqdm

        from benchmarks.servers import thinkgate

        with thinkgate(args.model, log=LOGS / "pets-pools-server.log") as url:
            chunk = 8
            # draw_http's own bar counts one chunk; this one the whole run.
            bar = tqdm(total=len(items), desc="pools, all chunks", unit="question", file=sys.stderr)
            for lo in range(0, len(items), chunk):
                # Seeds follow the question's index in the whole run, as in one call.
                part = draw_http(
                    url, items[lo : lo + chunk], replace(sampling, seed=lo * args.pool)
                )
                save(part)
                records += part
                bar.update(len(part))
            bar.close()
    seconds = time.perf_counter() - started
    tokens = sum(sum(r.completion_tokens) for r in records)
    print(f"pools: {len(records)} x {args.pool} samples, {tokens} tokens in {seconds:.0f} s")


def _first_budget_reaching(curve: list[tuple[float, Outcome]], target: float) -> float | None:
    """Smallest measured average budget whose SC reaches ``target``."""
    for _budget, out in sorted(curve, key=lambda c: c[1].samples):
        if out.sc >= target - 1e-12:
            return out.samples
    return None


def _budget_holding(curve: list[tuple[float, Outcome]], target: float) -> float | None:
    """Smallest measured average budget from which SC stays at ``target`` or above at
    every larger measured budget (``_first_budget_reaching`` may be a lucky touch)."""
    held: float | None = None
    for _budget, out in sorted(curve, key=lambda c: c[1].samples, reverse=True):
        if out.sc < target - 1e-12:
            break
        held = out.samples
    return held


def _budget_for_sc(curve: list[tuple[float, Outcome]], target: float) -> float | None:
    """Average budget at which SC first reaches ``target``, linearly interpolated
    between measured points (None if never reached)."""
    points = sorted(((o.samples, o.sc) for _, o in curve), key=lambda p: p[0])
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if y0 >= target:
            return x0
        if y0 < target <= y1:
            return x0 + (x1 - x0) * (target - y0) / (y1 - y0)
    if points and points[-1][1] >= target:
        return points[-1][0]
    return None


def _cmd_sweep(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    cal = [r.to_pool() for r in load_pools(_pool_path("train"))]
    test = [r.to_pool() for r in load_pools(_pool_path("test"))]
    fits = fit_pools(cal, seed=0)
    curves: dict[str, list[tuple[float, Outcome]]] = {"uniform": [], "online": [], "offline": []}
    tables: dict[float, dict[str, int]] = {}
    t0 = time.perf_counter()
    for b in UNIFORM_BUDGETS:
        curves["uniform"].append((b, uniform(test, b, runs=args.runs)))
    for b in tqdm(PETS_BUDGETS, desc="PETS budgets", unit="budget", file=sys.stderr):
        table = build_table(fits, average_budget=b, b_max=64)
        tables[b] = {bk.pattern: bk.budget for bk in table.buckets}
        curves["online"].append((b, online(test, table, runs=args.runs)))
        curves["offline"].append(
            (b, offline(test, b, runs=args.offline_runs, batch=args.batch, draws=args.draws))
        )
        print(f"B={b}: " + ", ".join(f"{m} {c[-1][1]}" for m, c in curves.items() if c), flush=True)
    print(f"sweep {time.perf_counter() - t0:.0f} s")
    _write_report(curves, tables, cal, test, args)


def _write_report(
    curves: dict[str, list[tuple[float, Outcome]]],
    tables: dict[float, dict[str, int]],
    cal: list[Pool],
    test: list[Pool],
    args: argparse.Namespace,
) -> None:
    max_sc = 1.0
    reach = {m: _first_budget_reaching(c, max_sc) for m, c in curves.items()}
    uniform_at = dict(curves["uniform"])
    levels = [(b, uniform_at[b].sc) for b in (8, 16, 32, 48) if b in uniform_at]
    lines = [
        "# PETS on the testbed (base model)",
        "",
        f"Pools of {len(test[0].labels)} samples per question (temperature 1.0, drawn "
        f"through the {'thinkgate HTTP API' if args.via == 'http' else 'in-process engine'}); "
        f"{len(cal)} calibration questions (train split), {len(test)} evaluation questions "
        f"(test split). Uniform and online: {args.runs} shuffles; offline (OKG, batch "
        f"{args.batch}, {args.draws} draws): {args.offline_runs} shuffles.",
        "Command: `python benchmarks/pets.py all` (pools cached in benchmarks/results/pets/).",
        "",
        "| method | average budget (target) | samples/question | SC | accuracy |",
        "|---|---|---|---|---|",
    ]
    for method, curve in curves.items():
        for budget, out in curve:
            lines.append(
                f"| {method} | {budget:g} | {out.samples:.2f} | {out.sc:.4f} | {out.accuracy:.4f} |"
            )
    lines += ["", "## Budget to reach a self-consistency level", ""]
    lines += [
        "Budgets at which each method first reaches a given SC (linear interpolation between "
        "measured points); reduction = 1 - budget / uniform's budget for the same SC.",
        "",
        "| target SC | uniform | online | reduction | offline | reduction |",
        "|---|---|---|---|---|---|",
    ]
    for b, level in [*levels, (64, max_sc)]:
        cells = [f"{_budget_for_sc(curves['uniform'], level) or b:.1f}"]
        base = _budget_for_sc(curves["uniform"], level) or float(b)
        for method in ("online", "offline"):
            got = _budget_for_sc(curves[method], level)
            cells += (
                [f"{got:.1f}", f"{100 * (1 - got / base):.0f}%"]
                if got is not None
                else ["not reached", "n/a"]
            )
        name = f"{level:.4f} (uniform@{b})" if b != 64 else "1.0 (maximum)"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    held = {m: _budget_holding(c, max_sc) for m, c in curves.items()}
    lines.append("")
    lines.append(
        "Smallest measured budget with SC = 1.0: "
        + ", ".join(f"{m} {v:.2f}" if v else f"{m} not reached" for m, v in reach.items())
        + "; from which SC stays 1.0 at every larger measured budget: "
        + ", ".join(f"{m} {v:.2f}" if v else f"{m} never" for m, v in held.items())
    )
    lines += ["", "## Online tables (B_t per warm-up pattern)", ""]
    for target, plan in tables.items():
        lines.append(f"- B_bar={target:g}: " + ", ".join(f"{k}:{v}" for k, v in plan.items()))
    (RESULTS / "pets.md").write_text("\n".join(lines) + "\n")
    doc = {
        m: [{"budget": b, "samples": o.samples, "sc": o.sc, "accuracy": o.accuracy} for b, o in c]
        for m, c in curves.items()
    }
    (RESULTS / "pets.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot(curves)
    print((RESULTS / "pets.md").read_text())


def plot(curves: dict[str, list[tuple[float, Outcome]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method, curve in curves.items():
        xs = [o.samples for _, o in curve]
        axes[0].plot(xs, [o.sc for _, o in curve], marker="o", label=method)
        axes[1].plot(xs, [o.accuracy for _, o in curve], marker="o", label=method)
    for ax, name in zip(axes, ("self-consistency", "accuracy"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("average samples per question")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("PETS vs uniform self-consistency (testbed base, test split)")
    fig.tight_layout()
    fig.savefig(RESULTS / "pets.png", dpi=120)


def _cmd_micro(args: argparse.Namespace) -> None:
    """Allocation cost: a full R+ estimate for 1,000 questions, and a steady-state round."""
    rng = np.random.default_rng(0)
    n, m = 1000, args.classes
    config = OkgConfig(total_budget=n * 64, cap=64, max_options=m, batch=args.batch, seed=0)
    alloc = OkgAllocator(n, config)
    for q, k in alloc.warmup_round():
        for _ in range(k):
            alloc.observe(q, int(rng.integers(0, 4)))
    t = time.perf_counter()
    alloc.gains()  # every posterior is stale after the warm-up
    full = time.perf_counter() - t
    times = []
    for _ in range(args.rounds):
        t = time.perf_counter()
        chosen = alloc.next_round()
        times.append(time.perf_counter() - t)
        for q in chosen:
            alloc.observe(q, int(rng.integers(0, 4)))
    report = (
        f"OKG allocation, {n} questions x {m} answer buckets x {config.draws} draws: "
        f"full R+ estimate {1000 * full:.0f} ms; steady-state round (top {args.batch} "
        f"questions re-estimated) median {1000 * float(np.median(times)):.1f} ms, "
        f"p90 {1000 * float(np.percentile(times, 90)):.1f} ms over {args.rounds} rounds"
    )
    print(report)
    path = RESULTS / "micro.md"
    head = "# OKG allocation microbenchmark\n"
    text = path.read_text() if path.exists() else head
    text = text if text.startswith(head) else head
    path.write_text(
        text + f"\n- `python benchmarks/pets.py micro --batch {args.batch}`: {report}\n"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("pools", "sweep", "micro", "live", "all"))
    p.add_argument("--calibration", type=int, default=48, help="train-split questions")
    p.add_argument("--test", type=int, default=100, help="test-split questions")
    p.add_argument("--pool", type=int, default=64)
    p.add_argument("--model", default=str(MODEL), help="model directory for the pools")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--offline-runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=1, help="OKG questions per round")
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--via", choices=("http", "local"), default="http", help="pool sampler")
    p.add_argument("--average-budget", type=float, default=16.0, help="live: B_bar")
    args = p.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.command in ("pools", "all"):
        _cmd_pools(args)
    if args.command in ("sweep", "all"):
        _cmd_sweep(args)
    if args.command in ("micro", "all"):
        if args.command == "all":
            args.batch = 16  # the sweep's batch is OKG's sequential rule; engines use rounds
        _cmd_micro(args)
    if args.command == "live":
        _cmd_live(args)


def _cmd_live(args: argparse.Namespace) -> None:
    from benchmarks.pets_live import run_live

    cal = [r.to_pool() for r in load_pools(_pool_path("train"))]
    table = build_table(
        fit_pools(cal, seed=0),
        average_budget=args.average_budget,
        b_max=64,
        calibration={"pool": args.pool, "source": str(_pool_path("train")), "seed": 0},
    )
    path = LOGS / f"pets-table-{args.average_budget:g}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.save(path)
    records = load_pools(_pool_path("test"))
    print(run_live(args.model, records, path, average_budget=args.average_budget, results=RESULTS))


if __name__ == "__main__":
    main()
