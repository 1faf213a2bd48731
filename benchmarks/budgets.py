"""``thinkgate bench budgets``: a request's deadline and total-token ceiling, held, and
``auto`` against fixed plans under the same limits, on held-out testbed questions.

One thinkgate server (testbed base model, its PRM for the step searches); test-split
questions of 8-12 operations, temperature 1, seeded per question. Four parts:

  deadlines   every method with ``budget.deadline_ms`` D (0.5, 1, 2, 4 s), at 1 and 8
              clients: the share answered, the share whose last byte came by 1.1 D, and
              accuracy (a late answer counts as none). One client: the methods rotated
              question by question; 8 clients of one method, after an unscored wave of
              it (where a deadline ends thinking follows the server's recent speed)
  tokens      ``auto`` with ``budget.tokens`` T (100, 300, 1000, 3000) against the
              envelope of the fixed plans run without a ceiling (the most accurate plan
              whose largest usage fits T); every method with the ceiling too (the share
              of requests that held it)
  minimum     ``elastic`` t=256 with ``thinking_min`` 0, 64, 128: accuracy and tokens
  cost        a deadline that never binds (60 s) against none: questions per second at
              8 clients, interleaved rounds (the order alternating), as a ratio in the
              same run
  peers       with ``--peers-venv DIR``: its_hub (self-consistency, particle filtering)
              and optillm on vLLM's own server under the same deadlines, as a client
              timeout (``benchmarks.deadline_peers``)

Writes ``benchmarks/results/budgets/budgets.{md,json,png}``.

    .venv/bin/python -m benchmarks.budgets [--questions 24] [--deadlines 0.5,1,2,4]
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

from benchmarks.budget_plans import CALIBRATION_GRID, FixedPlan, ask_all, ask_rotated, summary
from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import machine, thinkgate
from strategies.auto import accuracy_interval
from testbed import model_path
from testbed.task import make_questions

RESULTS = results_of("budgets")

# The fixed plans held to the same deadline as auto (None: auto itself).
DEADLINE_METHODS: tuple[FixedPlan | None, ...] = (
    None,
    FixedPlan("plain"),
    FixedPlan("elastic", 1, 128),
    FixedPlan("self-consistency", 4, 128),
    FixedPlan("self-consistency", 8, 128),
    FixedPlan("self-consistency", 16, 64),
    FixedPlan("deepconf", 8),
    FixedPlan("step-rejection", 4),
    FixedPlan("particle-filtering", 4),
)


def _label(plan: FixedPlan | None) -> str:
    return "auto" if plan is None else plan.label


async def _bench(url: str, args: argparse.Namespace) -> dict[str, Any]:
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    model = (await client.models.list()).data[0].id
    qs = make_questions("test", args.questions, seed=args.seed, min_ops=8, max_ops=12)
    deadlines = [float(x) for x in args.deadlines.split(",")]
    ceilings = [int(x) for x in args.tokens.split(",")]
    clients = [int(x) for x in args.clients.split(",")]
    n = len(qs)
    parts = set(args.parts.split(","))
    total = len(deadlines) * len(DEADLINE_METHODS) * len(clients) * n + len(deadlines) * len(
        DEADLINE_METHODS
    ) * sum(c for c in clients if c > 1)
    if "tokens" in parts:
        total += len(CALIBRATION_GRID) * n + len(ceilings) * len(DEADLINE_METHODS) * n
    total += (3 * n if "minimum" in parts else 0) + (
        2 * args.cost_rounds * n if "cost" in parts else 0
    )
    bar = tqdm(total=total, desc="requests", unit="req", file=sys.stderr)
    # Warm the server's decode-speed estimate and the engine (not counted).
    await ask_all(client, model, qs[:4], FixedPlan("self-consistency", 4, 64), {}, 4, 999, bar)
    out: dict[str, Any] = {"deadlines": {}}
    # Unscored questions that warm each crowded cell (not the measured ones).
    warm = make_questions("validation", max(clients), seed=args.seed, min_ops=8, max_ops=12)
    for c in clients:
        for d in deadlines:
            limits = {"deadline_ms": int(d * 1000)}
            if c == 1:  # one client: the plans rotated question by question
                rotated = await ask_rotated(
                    client, model, qs, DEADLINE_METHODS, limits, args.seed, bar
                )
                for plan, got in zip(DEADLINE_METHODS, rotated, strict=True):
                    out["deadlines"][f"{c}|{d}|{_label(plan)}"] = summary(got, d)
                continue
            for plan in DEADLINE_METHODS:
                # c clients of one plan: one unscored wave first, so the server's decode
                # speed is this plan's at this crowd, not the previous cell's.
                await ask_all(client, model, warm[:c], plan, limits, c, args.seed + 1, bar)
                got = await ask_all(client, model, qs, plan, limits, c, args.seed, bar)
                out["deadlines"][f"{c}|{d}|{_label(plan)}"] = summary(got, d)
    if "tokens" in parts:
        out["grid"], out["tokens"] = await _ceilings_part(client, model, qs, ceilings, args, bar)
    if "minimum" in parts:
        out["minimum"] = await _minimum_part(client, model, qs, args, bar)
    if "cost" in parts:
        out["cost"] = await _cost_part(client, model, qs, args, bar)
    bar.close()
    out["questions"] = n
    return out


async def _ceilings_part(
    client: Any, model: str, qs: Sequence[Any], ceilings: Sequence[int], args: Any, bar: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    grid: dict[str, Any] = {}
    tokens: dict[str, Any] = {}
    for plan in CALIBRATION_GRID:
        got = await ask_all(client, model, qs, plan, {}, 8, args.seed, bar)
        grid[plan.label] = summary(got)
    for t in ceilings:
        for method in DEADLINE_METHODS:
            got = await ask_all(client, model, qs, method, {"tokens": t}, 8, args.seed, bar)
            s = summary(got)
            s["held"] = sum(1 for o in got if o.tokens <= t) / max(1, len(got))
            tokens[f"{t}|{_label(method)}"] = s
    return grid, tokens


async def _minimum_part(client: Any, model: str, qs: Sequence[Any], args: Any, bar: Any) -> Any:
    out: dict[str, Any] = {}
    for m in (0, 64, 128):
        plan = FixedPlan("elastic", 1, 256)
        limits = {"thinking_min": m} if m else {}
        got = await ask_all(client, model, qs, plan, limits, 8, args.seed, bar)
        out[str(m)] = summary(got)
    return out


async def _cost_part(client: Any, model: str, qs: Sequence[Any], args: Any, bar: Any) -> Any:
    ratios = []
    arms: tuple[tuple[str, dict[str, int]], ...] = (
        ("none", {}),
        ("unbinding", {"deadline_ms": 60_000}),
    )
    for k in range(args.cost_rounds):
        timed = {}
        for name, limits in arms if k % 2 == 0 else arms[::-1]:
            t0 = time.perf_counter()
            await ask_all(
                client, model, qs, FixedPlan("self-consistency", 8, 128), limits, 8, 7, bar
            )
            timed[name] = len(qs) / (time.perf_counter() - t0)
        ratios.append(timed["unbinding"] / timed["none"])
    return {"ratios": ratios, "median": sorted(ratios)[len(ratios) // 2]}


def _deadline_peers_rows(peers: dict[str, Any]) -> list[tuple[str, str, str, dict[str, float]]]:
    out = []
    for key, s in peers.get("cells", {}).items():
        c, d, name = key.split("|")
        out.append((c, d, name, s))
    return out


def _auto_against(data: dict[str, Any], n: int) -> list[str]:
    """Per clients and deadline: auto's accuracy, the best fixed plan's and the best
    peer's, and whether auto is at or above each within the 95% interval (auto's upper
    bound at or above the other's accuracy)."""
    lines = [
        "auto against the best fixed plan and the best peer at each deadline (met: auto's "
        "95% interval reaches the other's accuracy):",
        "",
        "| clients | deadline | auto | best fixed plan | met | best peer | met |",
        "|---|---|---|---|---|---|---|",
    ]
    cells = data["deadlines"]
    peers = (data.get("peers") or {}).get("cells", {})
    for key, a in cells.items():
        c, d, name = key.split("|")
        if name != "auto":
            continue
        fixed = [
            (s["accuracy"], k.split("|")[2])
            for k, s in cells.items()
            if k.startswith(f"{c}|{d}|") and not k.endswith("|auto")
        ]
        peer = [
            (s["accuracy"], k.split("|")[2]) for k, s in peers.items() if k.startswith(f"{c}|{d}|")
        ]
        hi = accuracy_interval(round(a["accuracy"] * n), n)[1]
        f_acc, f_name = max(fixed, default=(0.0, "-"))
        p_acc, p_name = max(peer, default=(0.0, "-"))
        versus_peer = (
            "no peers run | -"
            if not peer
            else f"{p_name} {p_acc:.1%} | "
            + ("yes" if a["accuracy"] > p_acc else "tie" if a["accuracy"] == p_acc else "no")
        )
        lines.append(
            f"| {c} | {d} s | {a['accuracy']:.1%} | {f_name} {f_acc:.1%} | "
            f"{'yes' if hi >= f_acc else 'no'} | {versus_peer} |"
        )
    return lines


def envelope(grid: dict[str, dict[str, float]], ceiling: int) -> tuple[str | None, float]:
    """The most accurate fixed plan whose largest usage fits ``ceiling``."""
    fits = [(s["accuracy"], -s["tokens"], k) for k, s in grid.items() if s["max_tokens"] <= ceiling]
    if not fits:
        return None, 0.0
    acc, _, name = max(fits)
    return name, acc


def _ci(acc: float, n: int) -> str:
    lo, hi = accuracy_interval(round(acc * n), n)
    return f"{acc:.1%} ({lo:.0%}-{hi:.0%})"


def _report(data: dict[str, Any], args: argparse.Namespace, seconds: float) -> str:
    n = data["questions"]
    lines = [
        "# Budgets: deadlines, total-token ceilings, the minimum, and auto",
        "",
        f"Command: `.venv/bin/python -m benchmarks.budgets --questions {args.questions} "
        f"--deadlines {args.deadlines} --clients {args.clients} --seed {args.seed}"
        + (f" --tokens {args.tokens}" if "tokens" in data else f" --parts {args.parts}")
        + (f" --peers-venv {args.peers_venv}" if getattr(args, "peers_venv", None) else "")
        + (f" --out {args.out}" if args.out != "budgets" else "")
        + "`",
        f"Machine: {machine()}; {n} test-split questions (8-12 operations), temperature 1; "
        f"took {seconds / 60:.1f} min. Accuracy with Wilson 95% intervals.",
        "",
        "## Deadlines",
        "",
        "| clients | deadline | method | answered | by 1.1x deadline | accuracy | tokens | p90 s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, s in data["deadlines"].items():
        c, d, name = key.split("|")
        lines.append(
            f"| {c} | {d} s | {name} | {s['answered']:.0%} | {s['on_time']:.0%} | "
            f"{_ci(s['accuracy'], n)} | {s['tokens']:.0f} | {s['p90_seconds']:.2f} |"
        )
    peers = data.get("peers")
    if peers:
        lines += [
            "",
            "### The peers under the same deadlines (a client timeout: late = no answer)",
            "",
            "| clients | deadline | peer | answered | by 1.1x deadline | accuracy | tokens "
            "| p90 s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c, d, name, s in _deadline_peers_rows(peers):
            lines.append(
                f"| {c} | {d} s | {name} | {s['answered']:.0%} | {s['on_time']:.0%} | "
                f"{_ci(s['accuracy'], n)} | {s['tokens']:.0f} | {s['p90_seconds']:.2f} |"
            )
        for name, why in peers.get("failed", {}).items():
            lines.append(f"\n{name} did not run: {why}")
    lines += ["", *_auto_against(data, n)]
    if "tokens" not in data:  # --parts deadlines
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "## Total-token ceilings",
        "",
        "| ceiling | auto accuracy | auto tokens | held | envelope plan | envelope accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for t in [int(x) for x in args.tokens.split(",")]:
        a = data["tokens"][f"{t}|auto"]
        name, acc = envelope(data["grid"], t)
        lines.append(
            f"| {t} | {_ci(a['accuracy'], n)} | {a['tokens']:.0f} | {a['held']:.0%} | "
            f"{name or 'none fits'} | {_ci(acc, n) if name else '-'} |"
        )
    lines += ["", "Every method under each ceiling (share of requests that held it):", ""]
    lines += [
        "| ceiling | method | held | answered | accuracy | tokens |",
        "|---|---|---|---|---|---|",
    ]
    for key, s in data["tokens"].items():
        t, name = key.split("|")
        lines.append(
            f"| {t} | {name} | {s['held']:.0%} | {s['answered']:.0%} | "
            f"{_ci(s['accuracy'], n)} | {s['tokens']:.0f} |"
        )
    lines += ["", "## The thinking minimum (elastic, t = 256)", ""]
    lines += ["| thinking_min | accuracy | tokens |", "|---|---|---|"]
    for m, s in data["minimum"].items():
        lines.append(f"| {m} | {_ci(s['accuracy'], n)} | {s['tokens']:.0f} |")
    cost = data["cost"]
    lines += [
        "",
        "## Cost of a deadline that never binds",
        "",
        f"Questions per second with a 60 s deadline over none (self-consistency@8, 8 "
        f"clients), per interleaved round: {', '.join(f'{r:.3f}' for r in cost['ratios'])}; "
        f"median {cost['median']:.3f}.",
        "",
        "## The fixed grid without limits (the envelope's plans)",
        "",
        "| plan | accuracy | mean tokens | largest | p90 s |",
        "|---|---|---|---|---|",
    ]
    for name, s in data["grid"].items():
        lines.append(
            f"| {name} | {_ci(s['accuracy'], n)} | {s['tokens']:.0f} | {s['max_tokens']:.0f} | "
            f"{s['p90_seconds']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(data: dict[str, Any], args: argparse.Namespace, path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    deadlines = [float(x) for x in args.deadlines.split(",")]
    c = args.clients.split(",")[0]
    for plan in DEADLINE_METHODS:
        name = _label(plan)
        ys = [data["deadlines"][f"{c}|{d}|{name}"]["accuracy"] for d in deadlines]
        style = {"lw": 2.5, "color": "black"} if plan is None else {"lw": 1, "alpha": 0.6}
        left.plot(deadlines, ys, marker="o", label=name, **style)
    peer_cells = (data.get("peers") or {}).get("cells", {})
    for name in sorted({k.split("|")[2] for k in peer_cells}):
        ys = [peer_cells.get(f"{c}|{d}|{name}", {}).get("accuracy", 0.0) for d in deadlines]
        left.plot(deadlines, ys, marker="x", ls="--", lw=1, label=f"{name} (peer)")
    left.set_xscale("log")
    left.set_xlabel("deadline (s)")
    left.set_ylabel("accuracy (late = none)")
    left.set_title(f"accuracy against the deadline, {c} client(s)")
    left.legend(fontsize=7)
    for s in data["grid"].values():
        right.scatter(s["max_tokens"], s["accuracy"], s=12, color="grey")
    ceilings = [int(x) for x in args.tokens.split(",")]
    right.plot(
        ceilings,
        [data["tokens"][f"{t}|auto"]["accuracy"] for t in ceilings],
        marker="o",
        color="black",
        lw=2.5,
        label="auto under the ceiling",
    )
    right.set_xscale("log")
    right.set_xlabel("tokens (auto: ceiling; grey: a fixed plan's largest usage)")
    right.set_ylabel("accuracy")
    right.set_title("accuracy against total tokens")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=24)
    p.add_argument("--deadlines", default="0.5,1,2,4")
    p.add_argument("--tokens", default="100,300,1000,3000")
    p.add_argument("--clients", default="1,8")
    p.add_argument("--cost-rounds", type=int, default=9)
    p.add_argument("--peers-venv", default=None, help="the peers' venv (else no peers)")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--url", default=None, help="a running thinkgate server (else start one)")
    p.add_argument("--out", default="budgets")
    p.add_argument(
        "--parts",
        default="deadlines,tokens,minimum,cost",
        help="of deadlines,tokens,minimum,cost (deadlines always; the plot needs all)",
    )
    args = p.parse_args(list(argv) if argv is not None else None)
    RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.url:
        data = asyncio.run(_bench(args.url, args))
    else:
        log = LOGS / "budgets-server.log"
        with thinkgate(model_path("base"), "--reward-model", "none", log=log) as url:
            data = asyncio.run(_bench(url, args))
    if args.peers_venv:
        from tqdm import tqdm

        from benchmarks import deadline_peers

        deadlines = [float(x) for x in args.deadlines.split(",")]
        clients = [int(x) for x in args.clients.split(",")]
        qs = make_questions("test", args.questions, seed=args.seed, min_ops=8, max_ops=12)
        total = len(deadlines) * len(clients) * len(deadline_peers.PEERS) * len(qs)
        # thinkgate's side is kept first: a peer's failure must not lose it.
        (RESULTS / f"{args.out}.json").write_text(json.dumps(data, indent=1) + "\n")
        with tqdm(total=total, desc="peers", unit="req", file=sys.stderr) as bar:
            try:
                data["peers"] = deadline_peers.measure(
                    Path(args.peers_venv), qs, deadlines, clients, bar
                )
            except Exception as e:
                data["peers"] = {"cells": {}, "failed": {"all": f"{type(e).__name__}: {e}"}}
    seconds = time.perf_counter() - t0
    (RESULTS / f"{args.out}.json").write_text(json.dumps(data, indent=1) + "\n")
    text = _report(data, args, seconds)
    (RESULTS / f"{args.out}.md").write_text(text)
    if {"tokens", "minimum", "cost"} <= data.keys():
        plot(data, args, RESULTS / f"{args.out}.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
