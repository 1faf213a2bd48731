"""Sampling strategies: accuracy versus N for majority, Best-of-N and Best-of-Majority.

Protocol (the efficient one of PassAtK / PETS): for each held-out question (testbed
test split), ONE ``best-of-n`` request through the HTTP API (openai SDK) draws a pool
of ``--pool`` samples (temperature 1) and scores each once with the testbed reward
model (in-process vLLM pooling engine); the response's ``thinkgate`` object carries
every sample's answer and reward. Then, for each N, ``--draws`` random subsets of N
samples are taken from each pool and the selection rules of ``strategies.selection``
(the same functions the strategies run) are applied to each subset:

  single     one sample (pass@1 only; the mean over the pool)
  majority   top-k classes by count
  bon        top-k classes by mean reward (answer-level Best-of-N)
  bom        Best-of-Majority: classes with frequency >= alpha, top-k by mean reward

pass@k counts a question right when any of the k returned classes is the gold answer.
The claim checked (arXiv 2510.03199): BoM does not degrade as N grows; BoN can.
Writes ``benchmarks/results/sampling_accuracy/sampling-accuracy.md`` and ``sampling-accuracy.png``.

    .venv/bin/python -m benchmarks.sampling_accuracy [--questions 48] [--pool 64]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import ROOT, machine, thinkgate
from strategies.answers import equivalent
from strategies.selection import (
    AnswerClass,
    build_classes,
    select_best_of_majority,
    top_by_count,
    top_by_reward,
)
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("sampling_accuracy")
NS = (4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class _Pool:
    question: Question
    answers: tuple[str | None, ...]
    rewards: tuple[float, ...]
    tokens: int


async def _draw_pools(url: str, questions: Sequence[Question], pool: int) -> list[_Pool]:
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=900)
    gate = asyncio.Semaphore(4)
    model = (await client.models.list()).data[0].id

    async def one(q: Question) -> _Pool:
        async with gate:
            r = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": q.prompt}],
                temperature=1.0,
                extra_headers={"X-Strategy": "best-of-n", "X-Budget-Samples": str(pool)},
                extra_body={"scorer": "reward"},
            )
        tg: dict[str, Any] = r.model_extra["thinkgate"]  # type: ignore[index]
        assert tg["samples"] == pool and tg["scorer"] == "reward"
        bar.update(1)
        return _Pool(
            question=q,
            answers=tuple(tg["sample_answers"]),
            rewards=tuple(float(x) for x in tg["sample_rewards"]),
            tokens=r.usage.completion_tokens if r.usage else 0,
        )

    bar = tqdm(total=len(questions), desc="pools", unit="question", file=sys.stderr)
    pools = list(await asyncio.gather(*(one(q) for q in questions)))
    bar.close()
    return pools


def _correct(classes: Sequence[AnswerClass], gold: int) -> bool:
    return any(equivalent(c.answer, str(gold)) for c in classes)


def _evaluate(
    pools: Sequence[_Pool], *, n: int, k: int, draws: int, alphas: Sequence[float], seed: int
) -> dict[str, float]:
    """Accuracy (pass@k) of each rule at subset size ``n``, averaged over draws."""
    rng = random.Random(f"{seed}:{n}:{k}")
    hits: dict[str, list[float]] = {"majority": [], "bon": []}
    for a in alphas:
        hits[f"bom(a={a:g})"] = []
    for p in pools:
        size = len(p.answers)
        for _ in range(draws if n < size else 1):
            pick = rng.sample(range(size), n)
            classes = build_classes([p.answers[i] for i in pick], [p.rewards[i] for i in pick])
            gold = p.question.answer
            hits["majority"].append(_correct(top_by_count(classes, k), gold))
            hits["bon"].append(_correct(top_by_reward(classes, k), gold))
            for a in alphas:
                sel = select_best_of_majority(classes, k, alpha=a, total=n)
                hits[f"bom(a={a:g})"].append(_correct(sel.chosen, gold))
    return {name: 100.0 * statistics.fmean(v) for name, v in hits.items()}


def _single_accuracy(pools: Sequence[_Pool]) -> float:
    right = [
        a is not None and equivalent(a, str(p.question.answer)) for p in pools for a in p.answers
    ]
    return 100.0 * statistics.fmean(right)


def plot(
    table: dict[tuple[int, int], dict[str, float]], single: float, ks: Sequence[int], path: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ks), figsize=(5.5 * len(ks), 4.2), squeeze=False)
    for ax, k in zip(axes[0], ks, strict=True):
        ns = sorted(n for n, kk in table if kk == k)
        for method in table[(ns[0], k)]:
            ax.plot(ns, [table[(n, k)][method] for n in ns], marker="o", label=method)
        if k == 1:
            ax.axhline(single, color="grey", linestyle=":", label="single sample")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("N (samples drawn)")
        ax.set_ylabel(f"pass@{k} accuracy (%)")
        ax.set_title(f"pass@{k}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("testbed: majority vs Best-of-N vs Best-of-Majority (reward = testbed RM)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    from tqdm import tqdm

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=48)
    parser.add_argument("--pool", type=int, default=64)
    parser.add_argument("--draws", type=int, default=32, help="random subsets per N per question")
    parser.add_argument("--min-ops", type=int, default=9)
    parser.add_argument("--max-ops", type=int, default=12)
    parser.add_argument("--ks", default="1,3")
    parser.add_argument("--alphas", default="0.02,0.1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", default=None, help="a running thinkgate server (else start one)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    ks = [int(x) for x in args.ks.split(",")]
    alphas = [float(x) for x in args.alphas.split(",")]
    questions = make_questions(
        "test", args.questions, seed=args.seed, min_ops=args.min_ops, max_ops=args.max_ops
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.url:
        pools = asyncio.run(_draw_pools(args.url, questions, args.pool))
    else:
        log = LOGS / "sampling_accuracy-server.log"
        with thinkgate(model_path("base"), log=log) as url:
            pools = asyncio.run(_draw_pools(url, questions, args.pool))
    draw_s = time.perf_counter() - t0
    ns = [n for n in NS if n <= args.pool]
    cells = [(n, k) for k in ks for n in ns]
    table = {
        (n, k): _evaluate(pools, n=n, k=k, draws=args.draws, alphas=alphas, seed=args.seed)
        for n, k in tqdm(cells, desc="N x k", unit="cell", file=sys.stderr)
    }
    single = _single_accuracy(pools)
    _write_report(args, ks, ns, table, single, pools, draw_s)
    plot(table, single, ks, RESULTS / "sampling-accuracy.png")
    print((RESULTS / "sampling-accuracy.md").read_text())
    return 0


def _write_report(
    args: argparse.Namespace,
    ks: Sequence[int],
    ns: Sequence[int],
    table: dict[tuple[int, int], dict[str, float]],
    single: float,
    pools: Sequence[_Pool],
    draw_s: float,
) -> None:
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    tokens = sum(p.tokens for p in pools)
    lines = [
        "# Sampling strategies: accuracy versus N (testbed)",
        "",
        f"Protocol: {len(pools)} held-out questions (test split, {args.min_ops}-{args.max_ops} "
        f"operations), a pool of {args.pool} samples per question drawn ONCE (one "
        "`best-of-n` request each, temperature 1, through the HTTP API), each sample scored "
        f"ONCE by the testbed reward model; for each N, {args.draws} random subsets of N "
        "samples per question (one subset when N equals the pool), the selection rules of "
        "`strategies/selection.py` applied to each. Accuracy in %, averaged over "
        "questions and subsets. pass@k: right if any of the k returned answer classes is "
        "the gold answer.",
        "",
        f"Single-sample accuracy (mean over every pool sample): **{single:.1f}%**. "
        f"Pools: {tokens} completion tokens; {draw_s:.0f} s wall for drawing and scoring them "
        "(server start-up included when the benchmark starts the server).",
        "",
    ]
    for k in ks:
        methods = list(table[(ns[0], k)])
        lines += [f"## pass@{k}", "", "| N | " + " | ".join(methods) + " |"]
        lines.append("|---|" + "---|" * len(methods))
        for n in ns:
            row = table[(n, k)]
            lines.append(f"| {n} | " + " | ".join(f"{row[m]:.1f}" for m in methods) + " |")
        lines.append("")
    lines += [
        "![accuracy versus N](sampling-accuracy.png)",
        "",
        f"Machine: {machine()}. Commit {sha}. Reward model: `testbed/models/reward` "
        "(raw logit, vLLM pooling runner in the gateway process).",
        "",
        "Command: `.venv/bin/python -m benchmarks.sampling_accuracy "
        f"--questions {args.questions} --pool {args.pool} --draws {args.draws} "
        f"--min-ops {args.min_ops} --max-ops {args.max_ops} --ks {args.ks} "
        f"--alphas {args.alphas} --seed {args.seed}`",
        "",
    ]
    (RESULTS / "sampling-accuracy.md").write_text("\n".join(lines))


if __name__ == "__main__":
    raise SystemExit(main())
