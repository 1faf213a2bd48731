"""Elastic Reasoning: accuracy versus generated tokens at several thinking budgets t.

Compared in ONE run, on the same held-out questions (testbed test split), greedy:
  elastic@base        thinkgate, strategy elastic (t, s), testbed ``base`` model
  elastic@elastic     thinkgate, strategy elastic (t, s), testbed ``elastic`` model
  truncate@base       thinkgate, plain, ``max_tokens = t + 1 + s`` (what users do today)
  vllm-budget@base    vLLM's own server, ``thinking_token_budget = t``,
                      ``max_tokens = t + 1 + s`` (the peer feature; no solution budget)
plus each model unconstrained, for reference. Everything goes through HTTP with the
openai SDK. Writes ``benchmarks/results/elastic/elastic.md`` and ``elastic.png``.

    .venv/bin/python -m benchmarks.elastic [--per-op 8] [--budgets 0,16,32,64,96,128,192]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.out_paths import results_of
from benchmarks.servers import machine, thinkgate, vllm_server
from strategies.answers import extract_answer
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("elastic")
SOLUTION = 16
UNLIMITED = -1  # budget marker for the unconstrained reference rows


@dataclass(frozen=True, slots=True)
class _Row:
    method: str
    budget: int
    accuracy: float
    answered: float  # share of responses with a \boxed{} answer
    mean_tokens: float  # completion tokens per response
    mean_thinking: float
    correct: tuple[bool, ...] = ()  # per question, in question order (paired intervals)


async def _run_method(
    url: str, questions: Sequence[Question], *, method: str, budget: int, concurrency: int
) -> _Row:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=600)
    gate = asyncio.Semaphore(concurrency)

    async def one(q: Question) -> tuple[bool, bool, int, int]:
        kw: dict[str, Any] = {"temperature": 0.0}
        headers: dict[str, str] = {}
        body: dict[str, Any] = {}
        if budget == UNLIMITED:
            kw["max_tokens"] = 480 - 40
        elif method.startswith("elastic"):
            headers = {
                "X-Strategy": "elastic",
                "X-Budget-Thinking": str(budget),
                "X-Budget-Solution": str(SOLUTION),
            }
        elif method.startswith("truncate"):
            kw["max_tokens"] = budget + 1 + SOLUTION
        elif method.startswith("vllm-budget"):
            kw["max_tokens"] = budget + 1 + SOLUTION
            # The reasoning parser splits on the "</think>" text, which vLLM leaves out
            # of the output unless special tokens are kept.
            body = {"thinking_token_budget": budget, "skip_special_tokens": False}
        async with gate:
            r = await client.chat.completions.create(
                model=(await client.models.list()).data[0].id,
                messages=[{"role": "user", "content": q.prompt}],
                extra_headers=headers,
                extra_body=body or None,
                **kw,
            )
        content = r.choices[0].message.content or ""
        got = extract_answer(content)
        usage = r.usage
        assert usage is not None
        details = usage.completion_tokens_details
        thinking = details.reasoning_tokens if details and details.reasoning_tokens else 0
        return (
            got is not None and got == str(q.answer),
            got is not None,
            usage.completion_tokens,
            thinking or 0,
        )

    results = await asyncio.gather(*(one(q) for q in questions))
    await client.close()
    n = len(results)
    return _Row(
        method=method,
        budget=budget,
        accuracy=sum(r[0] for r in results) / n,
        answered=sum(r[1] for r in results) / n,
        mean_tokens=sum(r[2] for r in results) / n,
        mean_thinking=sum(r[3] for r in results) / n,
        correct=tuple(r[0] for r in results),
    )


def _sweep(
    url: str,
    questions: Sequence[Question],
    methods: Sequence[str],
    budgets: Sequence[int],
    concurrency: int,
) -> list[_Row]:
    from tqdm import tqdm

    rows = []
    cells = [(m, b) for m in methods for b in budgets]
    for method, budget in tqdm(cells, desc="methods x budgets", unit="cell", file=sys.stderr):
        row = asyncio.run(
            _run_method(url, questions, method=method, budget=budget, concurrency=concurrency)
        )
        print(
            f"  {method:18s} t={budget:4d} acc={row.accuracy:.3f} tokens={row.mean_tokens:6.1f}",
            flush=True,
        )
        rows.append(row)
    return rows


def _table(rows: Sequence[_Row]) -> str:
    lines = [
        "| method | t | accuracy | answered | mean generated tokens | mean thinking tokens |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        t = "none" if r.budget == UNLIMITED else str(r.budget)
        lines.append(
            f"| {r.method} | {t} | {r.accuracy:.3f} | {r.answered:.3f} | "
            f"{r.mean_tokens:.1f} | {r.mean_thinking:.1f} |"
        )
    return "\n".join(lines)


RULE = (
    "Rule, stated before the run: the processor's gain at a budget is established when the "
    "lower end of the paired 95% interval of elastic@base minus truncate@base (t interval "
    "over distinct questions) is above 0."
)


def _paired_table(rows: Sequence[_Row]) -> str:
    """elastic@base minus truncate@base, question by question, at each budget."""
    from server.calibrate.stats import paired

    lines = [
        "| t | elastic@base | truncate@base | difference [95%] (points) | gain established |",
        "|---:|---:|---:|---|---|",
    ]
    by = {(r.method, r.budget): r for r in rows}
    for (method, t), e in sorted(by.items(), key=lambda kv: kv[0][1]):
        cut = by.get(("truncate@base", t))
        if method != "elastic@base" or cut is None or len(e.correct) != len(cut.correct):
            continue
        mean, lo, hi = paired([float(x) for x in e.correct], [float(x) for x in cut.correct])
        lines.append(
            f"| {t} | {100 * e.accuracy:.1f}% | {100 * cut.accuracy:.1f}% | "
            f"{100 * mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] | "
            f"{'yes' if lo > 0 else 'no'} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[_Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for method in dict.fromkeys(r.method for r in rows if r.budget != UNLIMITED):
        pts = sorted(
            (r.mean_tokens, r.accuracy)
            for r in rows
            if r.method == method and r.budget != UNLIMITED
        )
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method)
    for r in rows:
        if r.budget == UNLIMITED:
            ax.scatter(
                [r.mean_tokens], [r.accuracy], marker="*", s=120, label=f"{r.method} (no budget)"
            )
    ax.set_xlabel("mean generated tokens per response")
    ax.set_ylabel("accuracy (testbed test split, greedy)")
    ax.set_title(f"Elastic Reasoning vs truncation (solution budget s={SOLUTION})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-op", type=int, default=8, help="questions per number of operations")
    ap.add_argument("--budgets", default="0,16,32,64,96,128,192")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--question-seed",
        type=int,
        default=100,
        help="questions of n operations are drawn with seed Q + n (another Q: fresh ones)",
    )
    ap.add_argument(
        "--only",
        choices=["base", "elastic", "vllm"],
        action="append",
        help="rerun only these servers' rows, keeping the others from elastic.json",
    )
    args = ap.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    questions = [
        q
        for ops in range(1, 13)
        for q in make_questions(
            "test", args.per_op, seed=args.question_seed + ops, min_ops=ops, max_ops=ops
        )
    ]
    logs = args.out / "logs"
    started = time.time()
    saved = args.out / "elastic.json"
    only = set(args.only or ["base", "elastic", "vllm"])
    kept = (
        [_Row(**r) for r in json.loads(saved.read_text())] if args.only and saved.exists() else []
    )
    groups = {
        "base": ("elastic@base", "truncate@base", "base"),
        "elastic": ("elastic@elastic", "elastic"),
        "vllm": ("vllm-budget@base",),
    }
    rows = [r for r in kept if not any(r.method in groups[g] for g in only)]
    print(f"{len(questions)} questions, budgets {budgets}", flush=True)
    print(f"rule: {RULE}", flush=True)
    if "base" in only:
        with thinkgate(model_path("base"), log=logs / "elastic-base.log") as url:
            rows += _sweep(
                url, questions, ["elastic@base", "truncate@base"], budgets, args.concurrency
            )
            rows += _sweep(url, questions, ["base"], [UNLIMITED], args.concurrency)
    if "elastic" in only:
        with thinkgate(model_path("elastic"), log=logs / "elastic-elastic.log") as url:
            rows += _sweep(url, questions, ["elastic@elastic"], budgets, args.concurrency)
            rows += _sweep(url, questions, ["elastic"], [UNLIMITED], args.concurrency)
    if "vllm" in only:
        with vllm_server(
            model_path("base"), "--reasoning-parser", "deepseek_r1", log=logs / "vllm-base.log"
        ) as url:
            rows += _sweep(url, questions, ["vllm-budget@base"], budgets, args.concurrency)
    order = [m for g in ("base", "elastic", "vllm") for m in groups[g]]
    rows.sort(key=lambda r: (order.index(r.method), r.budget))
    args.out.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    wall = time.time() - started
    args.out.mkdir(parents=True, exist_ok=True)
    plot(rows, args.out / "elastic.png")
    text = (
        "# Elastic Reasoning: accuracy vs generated tokens\n\n"
        f"{len(questions)} testbed test-split questions ({args.per_op} per number of "
        f"operations, 1-12), greedy, solution budget s={SOLUTION}; t is the thinking budget.\n"
        "Generated tokens are `usage.completion_tokens` as each server reports them "
        "(vLLM's server reports no reasoning-token count, hence 0 in its thinking column).\n"
        "elastic@* and vllm-budget@* force `</think>` after t thinking tokens; truncate@base "
        "cuts the whole response at t+1+s tokens (`answered` = a `\\boxed{}` answer came).\n\n"
        f"{_table(rows)}\n\n"
        f"On one model (`base`), the processor against truncation at each t. {RULE}\n\n"
        f"{_paired_table(rows)}\n\n"
        f"Machine: {machine()}. Wall time of the last invocation {wall:.0f} s.\n"
        f"Command: `.venv/bin/python -m benchmarks.elastic --per-op {args.per_op} "
        f"--budgets {args.budgets} --question-seed {args.question_seed}`\n\n![plot](elastic.png)\n"
    )
    (args.out / "elastic.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
