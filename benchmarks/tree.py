"""``thinkgate bench tree``: tree sampling against self-consistency, DeepConf and the PRM
searches at the same N, and its questions per second beside self-consistency's.

One ``thinkgate serve`` (the testbed ``base`` model in process, its PRM attached by
default) answers held-out questions (test split, 12-13 operations, just past the training
range: self-consistency@16 stays below 90% there; at 13-16 it falls to about 12%) at
temperature 1, question i seeded ``--sample-seed`` + i for every strategy, through the
OpenAI SDK (PRM-free variants of the searches too, ``reward: certainty``):

1. **Accuracy against tokens**: each strategy at each N (``--ns``), every question; per
   cell accuracy, generated tokens per question (``usage.completion_tokens``: every
   sample, branch and pruned candidate), and for ``tree`` where the tokens went: the
   leaves' thinking as N independent samples would have generated it, what the shared
   prefixes saved, what the early-stopped branches cost. The goal: at N = 16 and 32,
   tree's accuracy no lower than self-consistency@N's beyond the 95% interval of their
   paired difference (the same questions), with at most half its generated tokens.
2. **Questions per second at ``--clients`` clients**: blocks of ``--block`` questions,
   self-consistency@N and tree@N alternating block by block (``--blocks`` each, the order
   flipped every pair), so both see the same machine; the ratio of their rates. Goal:
   at least 1.5x. A block ends on its slowest question, with clients idle beside it from
   the moment its last question is sent; each block's "clients busy" says for what share
   of its time they were not. Blocks of 64 at 8 clients keep that share near 100%.
   The verdict's rule: met when the 95% interval of the block ratios is at or above
   1.5x and the paired accuracy interval's lower end is above -3 points, over distinct
   questions (blocks that cycle over the questions count each one once).

Writes ``benchmarks/results/tree/tree.{md,json,png}``.

    .venv/bin/python -m benchmarks.tree [--questions 32] [--ns 4,8,16,32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.out_paths import LOGS, beside, results_of
from benchmarks.paired import ratio_interval
from benchmarks.servers import ROOT, machine, thinkgate
from strategies.answers import equivalent
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("tree")
MARGIN = 3.0  # points: the accuracy non-inferiority margin of the speed goal's verdict
STRATEGIES = (
    "self-consistency",
    "deepconf",
    "tree",
    "beam-search",
    "particle-filtering",
    "dvts",
    # The searches weighed by the generator's own certainty instead of the PRM.
    'beam-search{"reward":"certainty"}',
    'particle-filtering{"reward":"certainty"}',
)
PRM = ("beam-search", "particle-filtering", "dvts")


@dataclass(frozen=True, slots=True)
class _Answer:
    correct: bool
    completion_tokens: int
    seconds: float
    failed: str | None = None
    tree: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Cell:
    strategy: str
    n: int
    accuracy: float
    completion_tokens: float  # mean per question
    seconds: float  # the whole set
    failed: int
    correct: tuple[bool, ...] = ()  # per question, for the paired intervals
    leaf_tokens: float = 0.0  # tree: the leaves' thinking as independent samples hold it
    shared_tokens: float = 0.0  # tree: what the shared prefixes saved of it
    stopped_tokens: float = 0.0  # tree: generated on branches no leaf grew from
    stops: float = 0.0
    forks: float = 0.0
    segments: float = 0.0
    busy_seconds: float = 0.0  # the questions' own seconds, summed (client-seconds busy)


def _body_of(strategy: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The X-Strategy and body of a label (``tree{"segment":16}``: tree with options)."""
    name, _, extra = strategy.partition("{")
    body: dict[str, Any] = json.loads("{" + extra) if extra else {}
    if name == "beam-search":
        body.setdefault("expansions", 2)
    if name == "tree":
        body = {**options, **body}
    return name, body


async def _ask(
    client: Any,
    model: str,
    q: Question,
    seed: int | None,
    strategy: str,
    n: int,
    args: argparse.Namespace,
) -> _Answer:
    import openai

    name, body = _body_of(strategy, args.tree_options)
    t0 = time.monotonic()
    try:
        r = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": q.prompt}],
            temperature=args.temperature,
            seed=seed,
            extra_headers={"X-Strategy": name, "X-Budget-Samples": str(n)},
            extra_body=body,
        )
    except openai.APIError as exc:
        return _Answer(False, 0, time.monotonic() - t0, failed=str(exc))
    tg: dict[str, Any] = (r.model_extra or {}).get("thinkgate", {})
    answer = (r.choices[0].model_extra or {}).get("thinkgate", {}).get("answer")
    return _Answer(
        correct=answer is not None and equivalent(str(answer), str(q.answer)),
        completion_tokens=r.usage.completion_tokens if r.usage else 0,
        seconds=time.monotonic() - t0,
        tree=tg.get("tree") or {},
    )


def _seed_of(args: argparse.Namespace, index: int) -> int | None:
    return None if args.sample_seed is None else args.sample_seed + index


async def _run_cell(
    client: Any,
    model: str,
    strategy: str,
    n: int,
    questions: Sequence[Question],
    args: argparse.Namespace,
    concurrency: int,
) -> _Cell:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, q: Question) -> _Answer:
        async with gate:
            return await _ask(client, model, q, _seed_of(args, i), strategy, n, args)

    t0 = time.monotonic()
    answers = await asyncio.gather(*(one(i, q) for i, q in enumerate(questions)))
    wall = time.monotonic() - t0
    ok = [a for a in answers if a.failed is None]

    def mean(key: str) -> float:
        return statistics.fmean(float(a.tree.get(key, 0)) for a in ok) if ok else 0.0

    return _Cell(
        strategy=strategy,
        n=n,
        accuracy=100.0 * sum(a.correct for a in answers) / len(answers),
        completion_tokens=statistics.fmean(a.completion_tokens for a in ok) if ok else 0.0,
        seconds=wall,
        failed=len(answers) - len(ok),
        correct=tuple(a.correct for a in answers),
        leaf_tokens=mean("leaf_tokens"),
        shared_tokens=mean("shared_tokens"),
        stopped_tokens=mean("stopped_tokens"),
        stops=mean("stops"),
        forks=mean("forks"),
        segments=mean("segments"),
        busy_seconds=sum(a.seconds for a in answers),
    )


def _paired_interval(a: Sequence[bool], b: Sequence[bool]) -> tuple[float, float]:
    """95% interval of mean(a - b) in points (normal approximation, paired questions)."""
    d = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    m = statistics.fmean(d)
    half = 1.96 * (statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else 0.0)
    return 100 * (m - half), 100 * (m + half)


@dataclass(frozen=True, slots=True)
class Rate:
    strategy: str
    block: int
    questions: int
    seconds: float
    correct: int
    tokens: float
    answers: tuple[bool, ...] = ()  # per question, for the paired interval
    busy: float = 1.0  # the share of the clients' seconds a question was in flight
    ids: tuple[int, ...] = ()  # the questions' indices (blocks cycle over the questions)

    @property
    def per_second(self) -> float:
        return self.questions / self.seconds if self.seconds else 0.0


async def _throughput(
    client: Any, model: str, questions: Sequence[Question], args: argparse.Namespace
) -> list[Rate]:
    """Self-consistency@N and every tree@N block by block at ``--clients`` in flight, the
    order turned by one each block (none always runs first, on a machine that drifts)."""
    from tqdm import tqdm

    order = ("self-consistency", *args.tree_labels)
    rates: list[Rate] = []
    bar = tqdm(total=len(order) * args.blocks, desc="throughput blocks", file=sys.stderr)
    for b in range(args.blocks):
        first = (b * args.block) % len(questions)
        ids = tuple((first + i) % len(questions) for i in range(min(args.block, len(questions))))
        block = [questions[i] for i in ids]
        turn = b % len(order)
        for name in order[turn:] + order[:turn]:
            cell = await _run_cell(client, model, name, args.rate_n, block, args, args.clients)
            rates.append(
                Rate(
                    name,
                    b,
                    len(block),
                    cell.seconds,
                    sum(cell.correct),
                    cell.completion_tokens,
                    cell.correct,
                    # A block ends on its slowest question: from the moment the last one
                    # is sent, clients fall idle one by one. How long they stood idle is
                    # part of the block's seconds, and differs between strategies whose
                    # questions take more or less alike times.
                    cell.busy_seconds / (args.clients * cell.seconds) if cell.seconds else 0.0,
                    ids=ids,
                )
            )
            bar.update(1)
    bar.close()
    return rates


def goal_lines(
    cells: Sequence[_Cell], rates: Sequence[Rate], label: str, args: argparse.Namespace
) -> list[str]:
    lines = []
    for n in (16, 32):
        sc = next((c for c in cells if c.strategy == "self-consistency" and c.n == n), None)
        tr = next((c for c in cells if c.strategy == label and c.n == n), None)
        if sc is None or tr is None:
            continue
        lo, hi = _paired_interval(tr.correct, sc.correct)
        ratio = tr.completion_tokens / sc.completion_tokens if sc.completion_tokens else 0.0
        kept = hi >= 0
        verdict = "met" if kept and ratio <= 0.5 else "not met"
        lines.append(
            f"{label}, N={n}: {tr.accuracy:.1f}% against self-consistency {sc.accuracy:.1f}% "
            f"(paired difference 95% interval [{lo:+.1f}, {hi:+.1f}] points: "
            f"{'not below' if kept else 'below'}), tokens {tr.completion_tokens:.0f} against "
            f"{sc.completion_tokens:.0f} = {ratio:.2f}x ({verdict}: same accuracy with at "
            "most 0.5x)."
        )
    if rates:
        by: dict[str, list[Rate]] = {}
        for r in rates:
            by.setdefault(r.strategy, []).append(r)
        sc_rates = by.get("self-consistency", [])
        tr_rates = by.get(label, [])
        if sc_rates and tr_rates:
            ratios = [
                t.per_second / s.per_second
                for s, t in zip(sc_rates, tr_rates, strict=False)
                if s.per_second
            ]
            med = statistics.median(ratios)
            acc_sc = 100 * sum(r.correct for r in sc_rates) / sum(r.questions for r in sc_rates)
            acc_tr = 100 * sum(r.correct for r in tr_rates) / sum(r.questions for r in tr_rates)
            # Over distinct questions: blocks cycle over them, and a question seeded alike
            # answers alike in every block it comes back in (one observation, not several).
            tr_first, sc_first = _first_answers(tr_rates), _first_answers(sc_rates)
            both = sorted(tr_first.keys() & sc_first.keys())
            lo, hi = _paired_interval([tr_first[i] for i in both], [sc_first[i] for i in both])
            typical, r_lo, r_hi = ratio_interval(ratios)
            # The rule, fixed before a run: the whole interval of the speed ratio at or
            # above 1.5x, and accuracy non-inferior (the paired interval's lower end above
            # -MARGIN points).
            met = not math.isnan(r_lo) and r_lo >= 1.5 and lo > -MARGIN
            # Questions per second = generated tokens per second / tokens per question: which
            # of the two a strategy's speed comes from (fewer tokens, or the engine kept as
            # busy as self-consistency keeps it).
            per_q = _tokens_per_question(tr_rates) / _tokens_per_question(sc_rates)
            per_s = _tokens_per_second(tr_rates) / _tokens_per_second(sc_rates)
            sure = (
                ""
                if math.isnan(r_lo)
                else f"; geometric mean {typical:.2f}x, 95% interval [{r_lo:.2f}, {r_hi:.2f}]x, "
                f"{'above' if r_lo >= 1.5 else 'not all above'} 1.5x"
            )
            lines.append(
                f"{label}: questions per second at {args.clients} clients, N = {args.rate_n}, "
                f"block by block against self-consistency: median {med:.2f}x (blocks "
                f"{min(ratios):.2f}-{max(ratios):.2f}x{sure}), accuracy {acc_tr:.1f}% against "
                f"{acc_sc:.1f}% (paired 95% interval [{lo:+.1f}, {hi:+.1f}] points over "
                f"{len(both)} distinct questions) ({'met' if met else 'not met'}: the speed "
                f"interval at or above 1.5x, the accuracy interval's lower end above "
                f"-{MARGIN:g} points). "
                f"Over all blocks: {per_q:.2f}x its tokens per question at {per_s:.2f}x its "
                f"generated tokens per second, {per_s / per_q:.2f}x its questions per second. "
                f"Clients busy: {100 * _busy(tr_rates):.0f}% of the blocks' time against "
                f"{100 * _busy(sc_rates):.0f}%."
            )
    return lines


def _first_answers(rates: Sequence[Rate]) -> dict[int, bool]:
    """Each distinct question's first answer over the blocks."""
    out: dict[int, bool] = {}
    for r in rates:
        # Without indices (older records), each block's questions count as its own.
        ids = r.ids or tuple(range(r.block * r.questions, r.block * r.questions + len(r.answers)))
        for i, a in zip(ids, r.answers, strict=True):
            out.setdefault(i, a)
    return out


def _tokens_per_question(rates: Sequence[Rate]) -> float:
    return sum(r.tokens * r.questions for r in rates) / sum(r.questions for r in rates)


def _tokens_per_second(rates: Sequence[Rate]) -> float:
    return sum(r.tokens * r.questions for r in rates) / sum(r.seconds for r in rates)


def _busy(rates: Sequence[Rate]) -> float:
    """The share of the clients' time spent on a question, over all blocks."""
    return sum(r.busy * r.seconds for r in rates) / sum(r.seconds for r in rates)


def plot(cells: Sequence[_Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10.5, 4.8))
    for name in dict.fromkeys(c.strategy for c in cells):
        row = sorted((c for c in cells if c.strategy == name), key=lambda c: c.n)
        base = name.partition("{")[0]
        style = "-o" if base == "tree" else ":^" if base in PRM else "--s"
        ax.plot([c.completion_tokens for c in row], [c.accuracy for c in row], style, label=name)
        for c in row:
            ax.annotate(str(c.n), (c.completion_tokens, c.accuracy), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens per question (log; every sample, branch and candidate)")
    ax.set_ylabel("accuracy %")
    ax.set_title("Tree sampling: accuracy against generated tokens (labels: N)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside: no point hidden
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(
    cells: Sequence[_Cell], rates: Sequence[Rate], args: argparse.Namespace, minutes: float
) -> str:
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    ns = sorted({c.n for c in cells})
    names = list(dict.fromkeys(c.strategy for c in cells))
    head = "| strategy | " + " | ".join(f"N={n}" for n in ns) + " |"
    sep = "|---" * (len(ns) + 1) + "|"

    def row(name: str, fmt: Any) -> str:
        by_n = {c.n: c for c in cells if c.strategy == name}
        return f"| {name} | " + " | ".join(fmt(by_n[n]) if n in by_n else "" for n in ns) + " |"

    acc = [
        row(n, lambda c: f"{c.accuracy:.1f}" + (f" ({c.failed} failed)" if c.failed else ""))
        for n in names
    ]
    tok = [row(n, lambda c: f"{c.completion_tokens:.0f}") for n in names]
    sec = [row(n, lambda c: f"{c.seconds:.0f}") for n in names]
    trees = [n for n in names if n.startswith("tree")]
    where = [
        "| tree | N | generated | leaves' thinking as N samples | saved by shared prefixes "
        "| spent on stopped branches | answers and the rest | forks | stops | segments |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in trees:
        for c in sorted((c for c in cells if c.strategy == name), key=lambda c: c.n):
            rest = c.completion_tokens - (c.leaf_tokens - c.shared_tokens) - c.stopped_tokens
            where.append(
                f"| {name} | {c.n} | {c.completion_tokens:.0f} | {c.leaf_tokens:.0f} | "
                f"{c.shared_tokens:.0f} | {c.stopped_tokens:.0f} | {rest:.0f} | "
                f"{c.forks:.1f} | {c.stops:.1f} | {c.segments:.1f} |"
            )
    rate_rows = [
        "| block | strategy | questions | seconds | q/s | accuracy % | tokens/q | clients busy % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rates:
        rate_rows.append(
            f"| {r.block} | {r.strategy} | {r.questions} | {r.seconds:.1f} | "
            f"{r.per_second:.3f} | {100 * r.correct / r.questions:.0f} | {r.tokens:.0f} | "
            f"{100 * r.busy:.0f} |"
        )
    options = json.dumps(args.tree_options) if args.tree_options else "the defaults"
    cell_sections = [
        "## Accuracy %",
        head,
        sep,
        *acc,
        "",
        "## Generated tokens per question (usage.completion_tokens)",
        head,
        sep,
        *tok,
        "",
        "## Wall seconds for the whole set",
        head,
        sep,
        *sec,
        "",
        "## Where tree's tokens went (means per question)",
        "",
        "Generated = the leaves' thinking as N independent samples would have generated "
        "it - what the shared prefixes saved + what the stopped branches cost + the "
        "answers (and the thinking-end tokens).",
        "",
        *where,
        "",
    ]
    return "\n".join(
        [
            "# Tree sampling against self-consistency, DeepConf and the PRM searches "
            "(thinkgate bench tree)",
            "",
            f"{args.questions} held-out testbed questions ({args.split} split, {args.min_ops}-"
            f"{args.max_ops} operations, seed {args.seed}), temperature {args.temperature:g}, "
            f"question i seeded {args.sample_seed} + i for every strategy, "
            + (f"{args.concurrency} questions in flight, " if cells else "")
            + "the testbed `base` model in process "
            f"with its PRM (`thinkgate serve` defaults). tree: {options}; beam-search: 2 "
            "candidates per beam; the other strategies their defaults. "
            f"Total {minutes:.1f} min.",
            "",
            *(cell_sections if cells else []),
            *(
                [
                    f"## Questions per second at {args.clients} clients (N = {args.rate_n}, "
                    "the order turned each block)",
                    "",
                    *rate_rows,
                    "",
                ]
                if rates
                else []
            ),
            "## Goal",
            "",
            *[
                f"- {line}"
                for label in args.tree_labels
                for line in goal_lines(cells, rates, label, args)
            ],
            "",
            *(
                [f"![accuracy against generated tokens]({Path(args.out).name}.png)", ""]
                if cells
                else []
            ),
            f"Machine: {machine()}. Commit {sha}.",
            "",
            "Command: `.venv/bin/python -m benchmarks.tree " + " ".join(args.argv) + "`",
            "",
        ]
    )


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="thinkgate bench tree", description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--min-ops", type=int, default=12)
    p.add_argument("--max-ops", type=int, default=13)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--split", default="test", choices=("test", "validation"))
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--sample-seed", type=int, default=1000)
    p.add_argument("--ns", default="4,8,16,32")
    p.add_argument(
        "--strategies",
        default=";".join(STRATEGIES),
        help='separated by ";" (or ","); options as JSON after a name: tree{"segment":16}',
    )
    p.add_argument("--tree-options", type=json.loads, default={}, help="JSON: every tree's")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--clients", type=int, default=8, help="the throughput part's")
    p.add_argument("--rate-n", type=int, default=16, help="the throughput part's N")
    p.add_argument("--blocks", type=int, default=4, help="blocks per strategy (0: skip)")
    p.add_argument(
        "--block",
        type=int,
        default=64,
        help="questions per block (64: 8 a client at 8 clients; the block's last questions "
        "run with clients idle beside them)",
    )
    p.add_argument("--url", help="a running thinkgate server (default: start one)")
    p.add_argument("--out", default=str(RESULTS / "tree"), help="path prefix of the results")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    names = [s for s in args.strategies.split(";" if ";" in args.strategies else ",") if s]
    args.names = names
    args.tree_labels = [s for s in names if s.startswith("tree")] or ["tree"]
    return args


async def _run_all(
    url: str, args: argparse.Namespace, questions: Sequence[Question]
) -> tuple[list[_Cell], list[Rate]]:
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=1800)
    model = (await client.models.list()).data[0].id
    ns = [int(x) for x in args.ns.split(",") if x]  # none: the throughput part alone
    cells: list[_Cell] = []
    out = Path(args.out)
    bar = tqdm(total=len(ns) * len(args.names), desc="tree bench", file=sys.stderr)
    for name in args.names:
        for n in ns:
            if name.startswith("dvts") and n % 4:
                bar.update(1)
                continue
            cell = await _run_cell(client, model, name, n, questions, args, args.concurrency)
            cells.append(cell)
            bar.set_postfix(strategy=name[:24], n=n, acc=f"{cell.accuracy:.0f}")
            bar.update(1)
            # Written after every cell: a long run that stops still leaves its figures.
            beside(out, ".json").write_text(json.dumps([asdict(c) for c in cells], indent=1))
    bar.close()
    rates = await _throughput(client, model, questions, args) if args.blocks else []
    await client.close()
    return cells, rates


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    questions = make_questions(
        args.split, args.questions, seed=args.seed, min_ops=args.min_ops, max_ops=args.max_ops
    )
    t0 = time.monotonic()
    if args.url:
        cells, rates = asyncio.run(_run_all(args.url, args, questions))
    else:
        log = LOGS / "tree-thinkgate.log"
        with thinkgate(model_path("base"), log=log) as url:
            cells, rates = asyncio.run(_run_all(url, args, questions))
    out = Path(args.out)
    payload = {"cells": [asdict(c) for c in cells], "rates": [asdict(r) for r in rates]}
    beside(out, ".json").write_text(json.dumps(payload, indent=1))
    text = report(cells, rates, args, (time.monotonic() - t0) / 60)
    beside(out, ".md").write_text(text)
    if cells:
        plot(cells, beside(out, ".png"))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
