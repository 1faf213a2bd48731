"""How well the testbed reward model ranks answers to ONE question (what Best-of-N needs).

    .venv/bin/python -m benchmarks.reward_within_question [--per-op 10] [--samples 16]

Samples ``--samples`` answers at temperature 1 from ``testbed/models/base`` for
``--per-op`` test questions of each difficulty in ``--min-ops..--max-ops``, scores them
with ``testbed/models/reward`` (in-process vLLM engines), and prints the AUROC over all
answers and the mean AUROC within a question (questions with both right and wrong
answers). Writes ``benchmarks/results/reward_within_question/reward-within-question.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.out_paths import results_of
from benchmarks.servers import machine
from testbed import model_path
from testbed.engine import classify, generate, load_llm, reward_text
from testbed.metrics import auroc
from testbed.task import make_questions

RESULTS = results_of("reward_within_question")


def main() -> None:
    from tqdm import tqdm

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--per-op", type=int, default=10)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--min-ops", type=int, default=9)
    p.add_argument("--max-ops", type=int, default=12)
    p.add_argument("--seed", type=int, default=5)
    args = p.parse_args()
    questions = []
    for ops in range(args.min_ops, args.max_ops + 1):
        questions += make_questions("test", args.per_op, seed=args.seed, min_ops=ops, max_ops=ops)
    base = load_llm(model_path("base"), seed=0)
    groups = generate(base, questions, n=args.samples, temperature=1.0)
    del base
    rm = load_llm(model_path("reward"), runner="pooling", seed=0)
    scores: list[float] = []
    labels: list[bool] = []
    within: list[float] = []
    for group in tqdm(groups, desc="scoring", unit="question", file=sys.stderr):
        s = classify(rm, [reward_text(c.question, c.text) for c in group])
        y = [c.correct for c in group]
        scores += s
        labels += y
        if 0 < sum(y) < len(y):
            within.append(auroc(s, y))
    lines = [
        "# Reward model: ranking within one question (testbed)",
        "",
        f"{len(questions)} test questions ({args.min_ops}-{args.max_ops} operations), "
        f"{args.samples} answers each from `base` at temperature 1, scored by `reward`.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| answers right | {sum(labels)} of {len(labels)} |",
        f"| AUROC over all answers | {auroc(scores, labels):.3f} |",
        f"| mean AUROC within a question ({len(within)} questions with both kinds) "
        f"| {statistics.mean(within):.3f} |",
        "",
        f"Machine: {machine()}. Command: `.venv/bin/python -m benchmarks.reward_within_question "
        f"--per-op {args.per_op} --samples {args.samples} --min-ops {args.min_ops} "
        f"--max-ops {args.max_ops} --seed {args.seed}`",
    ]
    text = "\n".join(lines) + "\n"
    (RESULTS / "reward-within-question.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
