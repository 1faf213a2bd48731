"""``thinkgate bench tree-lengths``: how often a sample is right by how long it thought.

Why a vote stop decides on weak leaves: the leaves that finish first are the ones that
thought least. On held-out testbed questions (the tree benchmark's: 12-13 operations),
``--n`` plain samples each at temperature 1 (question i seeded ``--sample-seed`` + i),
sorted within each question by the length of their thinking (characters; the testbed's
tokens are characters) and cut into quarters: the share of right answers per quarter,
and per question the accuracy of the shortest ``--n`` / 4 against all of them.

Writes ``benchmarks/results/tree_lengths/tree-lengths.{md,json}``.

    thinkgate bench tree-lengths [--url http://127.0.0.1:8012]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.out_paths import LOGS, beside, results_of
from benchmarks.servers import given_or_thinkgate, machine
from strategies.answers import equivalent
from testbed.task import Question, make_questions

RESULTS = results_of("tree_lengths")
# (thinking characters, right, the boxed answer or None): the answer lets the vote stop's
# rules be replayed on these samples (benchmarks.vote_stop_replay).
Sample = tuple[int, bool, str | None]
BOXED = re.compile(r"\\boxed\{([^}]*)\}")


async def _sample(
    client: Any, model: str, q: Question, seed: int, args: argparse.Namespace
) -> list[Sample]:
    """(thinking characters, right, answer) for each of the question's samples."""
    r = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": q.prompt}],
        n=args.n,
        temperature=args.temperature,
        seed=seed,
    )
    out = []
    for choice in r.choices:
        extra = choice.message.model_extra or {}
        thinking = extra.get("reasoning_content") or extra.get("reasoning") or ""
        found = BOXED.search(choice.message.content or "")
        answer = None if found is None else found.group(1).strip()
        right = answer is not None and equivalent(answer, str(q.answer))
        out.append((len(thinking), right, answer))
    return out


async def run(
    url: str, questions: Sequence[Question], args: argparse.Namespace
) -> list[list[Sample]]:
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=1800)
    model = (await client.models.list()).data[0].id
    gate = asyncio.Semaphore(args.concurrency)
    bar = tqdm(total=len(questions), desc="questions", file=sys.stderr)

    async def one(i: int, q: Question) -> list[Sample]:
        async with gate:
            got = await _sample(client, model, q, args.sample_seed + i, args)
        bar.update(1)
        return got

    samples = await asyncio.gather(*(one(i, q) for i, q in enumerate(questions)))
    bar.close()
    await client.close()
    return list(samples)


def report(samples: Sequence[Sequence[Sample]], args: argparse.Namespace) -> str:
    quarters: list[list[bool]] = [[], [], [], []]
    lengths: list[list[int]] = [[], [], [], []]
    shortest: list[float] = []
    every: list[float] = []
    for got in samples:
        ordered = sorted(got, key=lambda s: s[0])  # stable: ties keep the engine's order
        for k, (n_chars, right, _) in enumerate(ordered):
            quarters[4 * k // len(ordered)].append(right)
            lengths[4 * k // len(ordered)].append(n_chars)
        head = ordered[: max(1, len(ordered) // 4)]
        shortest.append(statistics.fmean(s[1] for s in head))
        every.append(statistics.fmean(s[1] for s in ordered))
    lines = [
        "# Right answers by the length of their thinking (python -m benchmarks.tree_lengths)",
        "",
        f"{len(samples)} held-out testbed questions ({args.split} split, {args.min_ops}-"
        f"{args.max_ops} operations, seed {args.seed}), {args.n} plain samples each at "
        f"temperature {args.temperature}, question i seeded {args.sample_seed} + i; sorted "
        "within each question by the characters of their thinking.",
        "",
        "| quarter by length | samples | right % | mean thinking (characters) |",
        "|---|---|---|---|",
    ]
    names = ("shortest", "second", "third", "longest")
    for name, rights, chars in zip(names, quarters, lengths, strict=True):
        lines.append(
            f"| {name} | {len(rights)} | {100 * statistics.fmean(rights):.1f} | "
            f"{statistics.fmean(chars):.0f} |"
        )
    lines += [
        "",
        f"Per question: the shortest quarter {100 * statistics.fmean(shortest):.1f}% right, "
        f"all samples {100 * statistics.fmean(every):.1f}%.",
        "",
        f"Machine: {machine()}.",
        "",
        f"Command: `.venv/bin/python -m benchmarks.tree_lengths {' '.join(args.argv)}`",
        "",
    ]
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="benchmarks.tree_lengths", description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=64)
    p.add_argument("--min-ops", type=int, default=12)
    p.add_argument("--max-ops", type=int, default=13)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--split", default="validation", choices=("test", "validation"))
    p.add_argument("--n", type=int, default=16, help="samples per question (a multiple of 4)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--sample-seed", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--url", help="a running thinkgate server (default: start one)")
    p.add_argument("--out", default=str(RESULTS / "tree-lengths"), help="path prefix")
    args = p.parse_args(argv)
    if args.n < 4 or args.n % 4:
        p.error("--n must be a multiple of 4")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    questions = make_questions(
        args.split, args.questions, seed=args.seed, min_ops=args.min_ops, max_ops=args.max_ops
    )
    t0 = time.monotonic()
    with given_or_thinkgate(args.url, log=LOGS / "tree-lengths-thinkgate.log") as url:
        samples = asyncio.run(run(url, questions, args))
    out = Path(args.out)
    # One line per question: 4,096 samples stay a small file.
    rows = ",\n".join(json.dumps(q, separators=(",", ":")) for q in samples)
    beside(out, ".json").write_text(f'{{"samples": [\n{rows}\n]}}\n')
    text = report(samples, args)
    beside(out, ".md").write_text(text)
    print(text)
    print(f"{(time.monotonic() - t0) / 60:.1f} min", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
