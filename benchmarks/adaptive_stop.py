"""``python -m benchmarks.adaptive_stop``: how the adaptive vote's stop rule trades samples
for accuracy, offline, on seeded samples scored once.

Draws 16 samples (temperature 1, seeded) for each of ``--questions`` questions of
``--min-ops`` to ``--max-ops`` operations from the testbed ``base`` model in vLLM, scores
each with the testbed PRM as ``scorer: prm`` serves it (the lowest step reward, the end
tag included), then replays stop rules over each question's samples in drawing order,
exactly as ``best-of-n`` with ``adaptive: true`` draws them (a round of ``r`` samples,
then another, up to 16):

* the PRM-weighted vote (the shipped rule): stop once the leading class holds at least
  ``share`` of the answered samples' summed score and at least ``weight`` itself;
* the same rule over plain counts (every sample weighs 1; ``weight`` a least count): an
  adaptive majority with no PRM, to tell the stop's saving from the PRM's picking.

Prints the table and writes ``benchmarks/results/adaptive_stop/adaptive-stop.md``; the samples are
kept in ``--cache`` (JSON) so that a rerun replays them without vLLM.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.out_paths import results_of
from benchmarks.servers import ROOT, machine
from testbed import model_path

RESULTS = results_of("adaptive_stop")
POOL = 16


@dataclass(frozen=True, slots=True)
class Drawn:
    answer: int | None
    correct: bool
    score: float  # what `scorer: prm` serves
    tokens: int


@dataclass(frozen=True, slots=True)
class Rule:
    weighted: bool
    round: int
    share: float
    weight: float

    def settled(self, pool: Sequence[Drawn]) -> bool:
        sums = _votes(pool, self.weighted)
        if not sums:
            return False
        lead, total = max(sums.values()), sum(sums.values())
        return total > 0 and lead >= self.weight and lead >= self.share * total


def _votes(pool: Sequence[Drawn], weighted: bool) -> dict[int, float]:
    out: dict[int, float] = defaultdict(float)
    for d in pool:
        if d.answer is not None:
            out[d.answer] += d.score if weighted else 1.0
    return out


def _pick(pool: Sequence[Drawn], weighted: bool) -> bool:
    """Whether the vote's winner (first seen on ties) is right."""
    sums = _votes(pool, weighted)
    if not sums:
        return False
    best = max(sums.values())
    winner = next(a for a, w in sums.items() if w == best)
    return any(d.correct for d in pool if d.answer == winner)


def replay(questions: Sequence[Sequence[Drawn]], rule: Rule) -> tuple[float, float, float]:
    """Accuracy %, mean generated tokens and mean samples per question under ``rule``."""
    hits, tokens, drawn = 0, 0, 0
    for samples in questions:
        k = min(rule.round, POOL)
        while k < POOL and not rule.settled(samples[:k]):
            k = min(POOL, k + rule.round)
        pool = samples[:k]
        hits += _pick(pool, rule.weighted)
        tokens += sum(d.tokens for d in pool)
        drawn += k
    n = len(questions)
    return 100.0 * hits / n, tokens / n, drawn / n


def _draw(args: argparse.Namespace) -> list[list[Drawn]]:
    from testbed.engine import generate, load_llm
    from testbed.prm import example
    from testbed.prm_eval import load_prm, prm_rewards
    from testbed.task import make_questions
    from testbed.tokenizer import CharCodec, chat_prompt

    codec = CharCodec()
    questions = make_questions(
        args.split, args.questions, seed=args.seed, min_ops=args.min_ops, max_ops=args.max_ops
    )
    base = load_llm(model_path("base"), seed=0)
    groups = generate(base, questions, n=POOL, temperature=1.0, seed=args.seed)
    del base
    flat = [c for g in groups for c in g]
    rows = [example(codec, c) for c in flat]
    tag = codec.encode("\n")[0]
    prompt_tags = codec.encode(chat_prompt(questions[0].prompt)).count(tag)
    prm = load_prm(model_path("prm"), step_tag_id=tag)
    rewards = prm_rewards(prm, rows, prompt_tags=prompt_tags)
    del prm
    scores = [min(r) if r else 1.0 for r in rewards]
    out = [
        Drawn(c.answer, c.correct, s, len(c.token_ids)) for c, s in zip(flat, scores, strict=True)
    ]
    return [out[i : i + POOL] for i in range(0, len(out), POOL)]


def _report(questions: Sequence[Sequence[Drawn]], args: argparse.Namespace, minutes: float) -> str:
    full = statistics.fmean(sum(d.tokens for d in q) for q in questions)
    lines = [
        "| rule | round | share | least weight | accuracy % | tokens / question | x SC@16 "
        "| samples |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, rule: Rule | None, acc: float, tok: float, ns: float) -> str:
        cells = ("", "", "") if rule is None else (rule.round, rule.share, rule.weight)
        return (
            f"| {name} | {cells[0]} | {cells[1]} | {cells[2]} | {acc:.1f} | {tok:.0f} | "
            f"{tok / full:.2f} | {ns:.1f} |"
        )

    for n in (4, 8, 16):
        for weighted, name in ((False, "majority"), (True, "PRM vote")):
            hits = sum(_pick(q[:n], weighted) for q in questions)
            tok = statistics.fmean(sum(d.tokens for d in q[:n]) for q in questions)
            lines.append(row(f"{name} of {n}", None, 100.0 * hits / len(questions), tok, n))
    for weighted in (True, False):
        for r in (4, 2):
            for share in (0.5, 0.6, 0.7):
                for weight in (0.5, 1.0) if weighted else (2.0, 3.0, 4.0):
                    rule = Rule(weighted, r, share, weight)
                    name = "adaptive PRM vote" if weighted else "adaptive majority"
                    lines.append(row(name, rule, *replay(questions, rule)))
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return "\n".join(
        [
            "# The adaptive vote's stop rule, replayed offline (benchmarks.adaptive_stop)",
            "",
            f"{len(questions)} questions ({args.split} split, {args.min_ops}-{args.max_ops} "
            f"operations, seed {args.seed}), 16 samples each from the testbed `base` model "
            "(temperature 1, seeded), each scored by the testbed PRM as `scorer: prm` "
            "serves it; every rule replays the samples in drawing order, as `best-of-n` "
            "with `adaptive: true` draws them (round after round up to 16). 'least weight' "
            "is a summed PRM score for the PRM vote and a count for the majority. Tokens "
            f"are generated tokens per question; self-consistency@16 spends {full:.0f}. "
            f"Total {minutes:.1f} min.",
            "",
            *lines,
            "",
            f"Machine: {machine()}. Commit {sha}.",
            "",
            "Command: `.venv/bin/python -m benchmarks.adaptive_stop " + " ".join(args.argv) + "`",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    p = argparse.ArgumentParser(prog="benchmarks.adaptive_stop", description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=int, default=300)
    p.add_argument("--min-ops", type=int, default=12)
    p.add_argument("--max-ops", type=int, default=13)
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--split", default="validation", choices=("test", "validation"))
    p.add_argument("--cache", help="samples JSON (default: one per settings under /tmp)")
    p.add_argument("--out", default=str(RESULTS / "adaptive-stop.md"))
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    start = time.monotonic()
    cache = Path(
        args.cache
        or f"/tmp/adaptive-stop-{args.split}-{args.questions}q-{args.min_ops}-{args.max_ops}"
        f"-seed{args.seed}.json"
    )
    if cache.exists():
        raw = json.loads(cache.read_text())
        questions = [[Drawn(**d) for d in q] for q in raw]
    else:
        questions = _draw(args)
        cache.write_text(json.dumps([[asdict(d) for d in q] for q in questions]))
    text = _report(questions, args, (time.monotonic() - start) / 60)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
