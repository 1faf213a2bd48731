"""``thinkgate bench search``: accuracy against generated tokens for the step searches
with a process reward model and the sampling strategies, on hard held-out questions.

One ``thinkgate serve`` (the testbed model in process, with its outcome reward model and
its PRM attached by default) answers every held-out question (test split, ``--min-ops``
to ``--max-ops`` operations, harder than the training range so that self-consistency@16
stays below 90%) once per strategy and N, temperature 1, through the OpenAI SDK:

  self-consistency   N samples, majority vote
  best-of-n          N samples, the outcome reward model's best answer class
  best-of-n-prm      N samples, a PRM-weighted vote (best-of-n, ``scorer: prm``,
                     ``select: vote``: each sample weighs its lowest step reward)
  best-of-n-prm-adaptive  the same vote drawn in rounds of 4 until it settles
                     (``adaptive: true``), N the cap
  pets               online PETS (the served table): N samples per question on average,
                     plain majority; the adaptive baseline without a PRM
  deepconf           N samples at most, confidence early stop (its defaults)
  beam-search        N beams x ``--beam-expansions`` candidates a step, PRM-pruned
  particle-filtering N particles, resampled by PRM weight each step
  dvts               N / ``--dvts-expansions`` greedy subtrees
  step-rejection     N paths, a step the PRM rejects drawn again from its path
  step-rejection-adaptive  the same in rounds of 4 paths until the PRM-weighted vote
                     settles (``adaptive: true``), N the cap

Per cell: accuracy, generated (completion) tokens per question as billed in ``usage``
(every sample and pruned candidate), the PRM's input tokens per question (reported by
the search in its ``thinkgate`` object, not billed), and wall seconds. The goal it
checks: a PRM search (or the PRM-weighted vote) at some N reaches self-consistency@16's
accuracy with at most half its generated tokens. Writes
``benchmarks/results/search/search.{md,json,png}``.

    .venv/bin/python -m benchmarks.search [--questions 32] [--ns 4,8,16,32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.out_paths import LOGS, beside, results_of
from benchmarks.servers import ROOT, machine, thinkgate
from strategies.answers import equivalent
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("search")
STRATEGIES = (
    "self-consistency",
    "best-of-n",
    "best-of-n-prm",
    "best-of-n-prm-adaptive",
    "pets",
    "deepconf",
    "beam-search",
    "particle-filtering",
    "dvts",
    "step-rejection",
    "step-rejection-adaptive",
)
SEARCHES = (
    "beam-search",
    "particle-filtering",
    "dvts",
    "step-rejection",
    "step-rejection-adaptive",
)
PRM_VOTES = ("best-of-n-prm", "best-of-n-prm-adaptive")
PRM_GUIDED = (*SEARCHES, *PRM_VOTES)  # what the goal is checked for


@dataclass(frozen=True, slots=True)
class _Answer:
    question: str
    gold: int
    answer: str | None
    correct: bool
    completion_tokens: int
    prompt_tokens: int
    prm_tokens: int
    seconds: float
    failed: str | None = None
    # A sampling strategy's pool voted by plain majority (its classes in the response):
    # for best-of-n-prm, the paired baseline on the very same samples.
    majority_correct: bool | None = None
    any_correct: bool | None = None  # some sample of the pool answered right (pass@N)
    samples: int = 0  # drawn (the adaptive vote and pets draw fewer than N)


@dataclass(frozen=True, slots=True)
class Cell:
    strategy: str
    n: int
    accuracy: float
    completion_tokens: float  # mean per question
    prm_tokens: float
    seconds: float  # wall time of the whole set
    failed: int
    majority_accuracy: float | None = None  # the same pools by plain majority
    any_accuracy: float | None = None  # the same pools' pass@N: what a perfect vote gets
    vote_only_right: int = 0  # questions the strategy got right and the majority wrong
    majority_only_right: int = 0
    samples: float = 0.0  # mean drawn per question


def request_of(
    strategy: str, n: int, args: argparse.Namespace
) -> tuple[dict[str, str], dict[str, Any]]:
    headers = {"X-Strategy": strategy, "X-Budget-Samples": str(n)}
    body: dict[str, Any] = {}
    if strategy == "best-of-n":
        body["scorer"] = "reward"
    elif strategy == "best-of-n-prm":
        headers["X-Strategy"] = "best-of-n"
        body.update(scorer="prm", select=args.prm_select)
    elif strategy == "best-of-n-prm-adaptive":
        headers["X-Strategy"] = "best-of-n"
        body.update(scorer="prm", select="vote", adaptive=True)
    elif strategy == "beam-search":
        body["expansions"] = args.beam_expansions
    elif strategy == "dvts":
        body["expansions"] = args.dvts_expansions
    elif strategy == "step-rejection-adaptive":
        headers["X-Strategy"] = "step-rejection"
        body["adaptive"] = True
    if strategy in SEARCHES and args.confidence is not None:
        body["confidence"] = args.confidence
    if strategy in SEARCHES:
        body.update(args.option)
    return headers, body


def question_seed(args: argparse.Namespace, index: int) -> int | None:
    """The seed of the ``index``-th question's request: the same for every strategy and
    N, so that strategies sampling one pool (self-consistency, best-of-n) draw the same
    samples of a question and differ only in how they choose."""
    return None if args.sample_seed is None else args.sample_seed + index


async def _run_cell(
    url: str, strategy: str, n: int, questions: Sequence[Question], args: argparse.Namespace
) -> tuple[Cell, list[_Answer]]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=1800)
    model = (await client.models.list()).data[0].id
    gate = asyncio.Semaphore(args.concurrency)
    headers, body = request_of(strategy, n, args)

    async def one(i: int, q: Question) -> _Answer:
        async with gate:
            t0 = time.monotonic()
            try:
                r = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": q.prompt}],
                    temperature=args.temperature,
                    seed=question_seed(args, i),
                    extra_headers=headers,
                    extra_body=body,
                )
            except openai.APIError as exc:
                return _Answer(q.prompt, q.answer, None, False, 0, 0, 0, 0.0, failed=str(exc))
            seconds = time.monotonic() - t0
        tg: dict[str, Any] = r.model_extra.get("thinkgate", {}) if r.model_extra else {}
        choice_tg = (r.choices[0].model_extra or {}).get("thinkgate", {})
        answer = choice_tg.get("answer")
        usage = r.usage
        voted = [c for c in tg.get("classes") or [] if c.get("answer") is not None]
        majority = max(voted, key=lambda c: c["count"])["answer"] if voted else None
        return _Answer(
            question=q.prompt,
            gold=q.answer,
            answer=answer,
            correct=answer is not None and equivalent(str(answer), str(q.answer)),
            completion_tokens=usage.completion_tokens if usage else 0,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            prm_tokens=int(tg.get("prm_tokens") or 0),
            seconds=seconds,
            # A search reports N; its adaptive draw, the paths it drew.
            samples=int((tg.get("adaptive") or {}).get("paths") or tg.get("samples") or 0),
            any_correct=(
                None
                if not voted
                else any(equivalent(str(c["answer"]), str(q.answer)) for c in voted)
            ),
            majority_correct=(
                None
                if not voted
                else majority is not None and equivalent(str(majority), str(q.answer))
            ),
        )

    t0 = time.monotonic()
    answers = list(await asyncio.gather(*(one(i, q) for i, q in enumerate(questions))))
    wall = time.monotonic() - t0
    await client.close()
    ok = [a for a in answers if a.failed is None]
    paired = [a for a in ok if a.majority_correct is not None]
    cell = Cell(
        strategy=strategy,
        n=n,
        accuracy=100.0 * sum(a.correct for a in answers) / len(answers),
        completion_tokens=statistics.fmean(a.completion_tokens for a in ok) if ok else 0.0,
        prm_tokens=statistics.fmean(a.prm_tokens for a in ok) if ok else 0.0,
        seconds=wall,
        failed=len(answers) - len(ok),
        majority_accuracy=(
            100.0 * sum(bool(a.majority_correct) for a in paired) / len(answers) if paired else None
        ),
        any_accuracy=(
            100.0 * sum(bool(a.any_correct) for a in paired) / len(answers) if paired else None
        ),
        vote_only_right=sum(a.correct and not a.majority_correct for a in paired),
        majority_only_right=sum(bool(a.majority_correct) and not a.correct for a in paired),
        samples=statistics.fmean(a.samples for a in ok) if ok else 0.0,
    )
    return cell, answers


def _goal(cells: Sequence[Cell]) -> list[str]:
    """Lines on the goal: a PRM search at SC@16's accuracy with <= half its tokens."""
    sc16 = next((c for c in cells if c.strategy == "self-consistency" and c.n == 16), None)
    if sc16 is None:
        return ["self-consistency@16 was not run: no goal check."]
    lines = [
        f"self-consistency@16: accuracy {sc16.accuracy:.1f}%, "
        f"{sc16.completion_tokens:.0f} generated tokens per question."
    ]
    ran = {c.strategy for c in cells}
    for name in (s for s in PRM_GUIDED if s in ran):
        hits = [
            c for c in cells if c.strategy == name and c.accuracy >= sc16.accuracy and c.failed == 0
        ]
        if not hits:
            lines.append(f"{name}: no N reached {sc16.accuracy:.1f}%.")
            continue
        best = min(hits, key=lambda c: c.completion_tokens)
        ratio = best.completion_tokens / sc16.completion_tokens if sc16.completion_tokens else 0
        verdict = "met" if ratio <= 0.5 else "not met"
        lines.append(
            f"{name}@{best.n}: accuracy {best.accuracy:.1f}% with {best.completion_tokens:.0f} "
            f"tokens = {ratio:.2f}x self-consistency@16's ({verdict}: at most 0.5x)."
        )
    return lines


def plot(cells: Sequence[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for name in dict.fromkeys(c.strategy for c in cells):
        row = sorted((c for c in cells if c.strategy == name), key=lambda c: c.n)
        style = "-o" if name in PRM_GUIDED else "--s"
        ax.plot([c.completion_tokens for c in row], [c.accuracy for c in row], style, label=name)
        for c in row:
            ax.annotate(str(c.n), (c.completion_tokens, c.accuracy), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens per question (log; every sample and pruned candidate)")
    ax.set_ylabel("accuracy %")
    ax.set_title("Accuracy against generated tokens (labels: N)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(cells: Sequence[Cell], args: argparse.Namespace, minutes: float) -> str:
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
    prm = [row(n, lambda c: f"{c.prm_tokens:.0f}") for n in names if n in SEARCHES]
    sec = [row(n, lambda c: f"{c.seconds:.0f}") for n in names]
    drawn = [
        row(n, lambda c: f"{c.samples:.1f}")
        for n in names
        if n not in SEARCHES or n == "step-rejection-adaptive"
    ]
    same = [
        row(
            n,
            lambda c: (
                f"{c.accuracy:.1f} / {c.majority_accuracy:.1f} / {c.any_accuracy:.1f} "
                f"(+{c.vote_only_right} -{c.majority_only_right})"
                if c.majority_accuracy is not None and c.any_accuracy is not None
                else f"{c.accuracy:.1f} / - / -"
            ),
        )
        for n in names
        if n in PRM_VOTES
    ]
    return "\n".join(
        [
            "# Step search with a PRM against the sampling strategies (thinkgate bench search)",
            "",
            f"{args.questions} held-out testbed questions ({args.split} split, {args.min_ops}-"
            f"{args.max_ops} operations, seed {args.seed}), temperature {args.temperature:g}, "
            + (
                "unseeded sampling, "
                if args.sample_seed is None
                else f"question i sampled with seed {args.sample_seed} + i (every strategy "
                "draws from the same seeds: self-consistency and best-of-n share their pools), "
            )
            + f"{args.concurrency} questions in flight, the testbed `base` model in process "
            "with its outcome reward model and PRM (`thinkgate serve` defaults). "
            f"beam-search: {args.beam_expansions} candidates per beam per step; dvts: "
            f"subtrees of {args.dvts_expansions}; particle-filtering: resampling temperature "
            "1, systematic, weights from each particle's latest step reward; step-rejection: "
            "a step rewarded under 0.5 drawn again, twice at most (the defaults: "
            "an option given to every search, below, overrides them); all searches: "
            "a path's lowest step reward as its score (the default `aggregate`) and a "
            "PRM-weighted vote over the finished paths (the default `select`); step "
            "rewards times the generator's confidence, option `confidence` = "
            f"{'the server default' if args.confidence is None else args.confidence}; "
            "best-of-n-prm: N samples scored by their lowest step reward, "
            + (
                "a PRM-weighted vote"
                if args.prm_select == "vote"
                else "the answer class of best mean score (`select: best`)"
            )
            + (f"; every search also given {json.dumps(args.option)}" if args.option else "")
            + (f"; served with {' '.join(args.serve_args)}" if args.serve_args else "")
            + f". Total {minutes:.1f} min.",
            "",
            "## Accuracy %",
            head,
            sep,
            *acc,
            "",
            "## Generated tokens per question (usage.completion_tokens, every candidate)",
            head,
            sep,
            *tok,
            "",
            "## PRM input tokens per question (the searches' scoring, not billed)",
            head,
            sep,
            *prm,
            "",
            "## Wall seconds for the whole set",
            head,
            sep,
            *sec,
            "",
            "## Samples (paths) drawn per question (the sampling strategies and the adaptive "
            "search; N is the adaptive ones' cap)",
            head,
            sep,
            *drawn,
            "",
            *(
                [
                    "## The PRM votes against plain majority on the same samples",
                    "",
                    "Accuracy % of best-of-n-prm / of a majority vote over its own pools "
                    "(from the answer classes it reports) / of a perfect vote over them "
                    "(some sample right: pass@N, the ceiling of any verifier); in brackets "
                    "the questions only the PRM vote got right and only the majority got "
                    "right.",
                    "",
                    head,
                    sep,
                    *same,
                    "",
                ]
                if same
                else []
            ),
            "## Goal",
            "",
            *[f"- {line}" for line in _goal(cells)],
            "",
            f"![accuracy against generated tokens]({Path(args.out).name}.png)",
            "",
            f"Machine: {machine()}. Commit {sha}.",
            "",
            "Command: `.venv/bin/python -m benchmarks.search " + " ".join(args.argv) + "`",
            "",
        ]
    )


def _search_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="thinkgate bench search", description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=32)
    p.add_argument("--min-ops", type=int, default=13)
    p.add_argument("--max-ops", type=int, default=16)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--split", default="test", choices=("test", "validation"))
    p.add_argument(
        "--confidence",
        type=float,
        help="the searches' option confidence (alpha of the generator's step confidence; "
        "default: the server's)",
    )
    p.add_argument(
        "--option",
        action="append",
        type=_search_option,
        default=[],
        metavar="KEY=VALUE",
        help="a body option of every search request, the value as JSON "
        "(e.g. resample_temperature=1000: particle filtering without the PRM's say)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="every request's (the goal is read at 1; 0 with N = 1 is greedy decoding)",
    )
    p.add_argument(
        "--sample-seed",
        type=int,
        help="question i's requests carry seed SAMPLE_SEED + i: strategies compared on the "
        "same draws (default: unseeded)",
    )
    p.add_argument("--ns", default="4,8,16,32")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--prm-select",
        default="vote",
        choices=("vote", "best"),
        help="best-of-n-prm's rule: the PRM-weighted vote, or the class of best mean score",
    )
    p.add_argument("--beam-expansions", type=int, default=2)
    p.add_argument("--dvts-expansions", type=int, default=4)
    p.add_argument("--url", help="a running thinkgate server (default: start one)")
    p.add_argument(
        "--serve-arg",
        dest="serve_args",
        action="append",
        default=[],
        help="an argument of the server this bench starts (e.g. --serve-arg=--prm-model=DIR)",
    )
    p.add_argument("--out", default=str(RESULTS / "search"), help="path prefix of the results")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.option = dict(args.option)
    return args


async def _run_all(url: str, args: argparse.Namespace, questions: Sequence[Question]) -> list[Cell]:
    from tqdm import tqdm

    ns = [int(x) for x in args.ns.split(",")]
    names = [s for s in args.strategies.split(",") if s]
    cells: list[Cell] = []
    raw: list[dict[str, Any]] = []
    out = Path(args.out)
    bar = tqdm(total=len(ns) * len(names), desc="search bench")
    for name in names:
        for n in ns:
            if name == "dvts" and n % args.dvts_expansions:
                bar.update(1)
                continue
            cell, answers = await _run_cell(url, name, n, questions, args)
            cells.append(cell)
            raw.append({"cell": asdict(cell), "answers": [asdict(a) for a in answers]})
            bar.set_postfix(strategy=name, n=n, acc=f"{cell.accuracy:.0f}")
            bar.update(1)
            # Written after every cell: a long run that stops still leaves its figures.
            beside(out, ".json").write_text(json.dumps(raw, indent=1))
    bar.close()
    return cells


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    questions = make_questions(
        args.split, args.questions, seed=args.seed, min_ops=args.min_ops, max_ops=args.max_ops
    )
    t0 = time.monotonic()
    if args.url:
        cells = asyncio.run(_run_all(args.url, args, questions))
    else:
        log = LOGS / "search-thinkgate.log"
        with thinkgate(model_path("base"), "--max-n", "16", *args.serve_args, log=log) as url:
            cells = asyncio.run(_run_all(url, args, questions))
    out = Path(args.out)
    text = report(cells, args, (time.monotonic() - t0) / 60)
    beside(out, ".md").write_text(text)
    plot(cells, beside(out, ".png"))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
