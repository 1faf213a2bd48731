"""How well the generator's own confidence in a step marks wrong steps, beside the PRM.

``thinkgate bench step-confidence`` samples ``--samples`` answers at temperature 1 from
``base`` for held-out questions of ``--min-ops``..``--max-ops`` operations (vLLM in
process, the sampled tokens' logprobs with them), labels every thinking line by exact
arithmetic (``testbed.prm_labels``), then scores the lines three ways: the mean (or the
lowest) logprob of the line's tokens under the generator, the PRM's reward (through
vLLM's pooling engine), and the PRM's reward times ``exp(alpha x mean logprob)`` (what
the searches' option ``confidence`` computes). It reports what a search needs: the AUROC
over each trajectory's steps up to its first wrong one, and the ranking of whole
trajectories within one question (min over lines). Writes
``benchmarks/results/step_confidence/step-confidence.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.out_paths import beside, results_of
from testbed import model_path

ROOT = Path(__file__).resolve().parent.parent
OUT = results_of("step_confidence") / "step-confidence"
STEP_TAG_ID = 47  # the testbed's newline: the PRM's step tag
ALPHAS = (0.5, 1.0, 2.0, 5.0)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="thinkgate bench step-confidence", description=__doc__)
    p.add_argument("--per-op", type=int, default=20, help="questions per operation count")
    p.add_argument("--min-ops", type=int, default=12)
    p.add_argument("--max-ops", type=int, default=13)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--split", default="test", choices=("test", "validation"))
    p.add_argument(
        "--prm",
        action="append",
        type=Path,
        default=None,
        help="a PRM directory to score beside the shipped one (repeatable)",
    )
    p.add_argument("--out", default=str(OUT))
    return p.parse_args(argv)


def line_scores(
    positions: Sequence[int], lines: int, prompt_len: int, logprobs: Sequence[float], how: str
) -> list[float]:
    """Per thinking line (its tokens up to and including its tag): the mean or the
    lowest of the generator's logprobs of them."""
    out: list[float] = []
    start = prompt_len
    for pos in positions[:lines]:
        seg = logprobs[start - prompt_len : pos - prompt_len + 1]
        start = pos + 1
        out.append((min(seg) if how == "min" else sum(seg) / len(seg)) if seg else 0.0)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from vllm import SamplingParams

    from testbed.engine import load_llm, to_completion
    from testbed.prm import example, first_error_auroc
    from testbed.prm_eval import _regroup, load_prm, prm_rewards, within_question
    from testbed.task import make_questions
    from testbed.tokenizer import CharCodec, chat_prompt

    args = _parse(argv)
    t0 = time.monotonic()
    codec = CharCodec()
    questions = []
    for ops in range(args.min_ops, args.max_ops + 1):
        questions += make_questions(
            args.split, args.per_op, seed=args.seed, min_ops=ops, max_ops=ops
        )
    n = args.samples
    base = load_llm(model_path("base"), seed=0)
    params = SamplingParams(
        n=n, temperature=1.0, max_tokens=420, skip_special_tokens=False, logprobs=0
    )
    outs = base.generate([chat_prompt(q.prompt) for q in questions], params, use_tqdm=True)
    del base
    comps = []
    logprobs: list[list[float]] = []
    for q, result in zip(questions, outs, strict=True):
        for o in result.outputs:
            comps.append(to_completion(codec, q, o.token_ids))
            assert o.logprobs is not None
            logprobs.append(
                [d[t].logprob if d else 0.0 for t, d in zip(o.token_ids, o.logprobs, strict=True)]
            )
    rows = [example(codec, c) for c in comps]
    right = [[c.correct for c in comps[i : i + n]] for i in range(0, len(comps), n)]
    prompt_len = len(codec.encode(chat_prompt(questions[0].prompt)))

    def measure(scores: list[list[float]]) -> dict[str, float]:
        traj = [min(s) if s else 0.0 for s in scores]
        within, _ = within_question(_regroup(traj, n), right)
        return {"first_error": first_error_auroc(scores, rows), "within": within}

    def conf(how: str) -> list[list[float]]:
        return [
            line_scores(r.positions, r.lines, prompt_len, lp, how)
            for r, lp in zip(rows, logprobs, strict=True)
        ]

    table: dict[str, dict[str, float]] = {
        "generator: mean logprob of the line": measure(conf("mean")),
        "generator: lowest logprob in the line": measure(conf("min")),
    }
    tags = codec.encode(chat_prompt(questions[0].prompt)).count(STEP_TAG_ID)

    def score_with(directory: Path) -> list[list[float]]:
        prm = load_prm(directory, step_tag_id=STEP_TAG_ID)
        got = [
            r[: row.lines]
            for r, row in zip(prm_rewards(prm, rows, prompt_tags=tags), rows, strict=True)
        ]
        del prm
        return got

    mean = conf("mean")

    def combined(rewards: list[list[float]], a: float) -> list[list[float]]:
        return [
            [p * math.exp(a * c) for p, c in zip(r, s, strict=False)]
            for r, s in zip(rewards, mean, strict=True)
        ]

    rewards = score_with(model_path("prm"))
    table["PRM"] = measure(rewards)
    for alpha in ALPHAS:
        table[f"PRM x exp({alpha} x mean logprob)"] = measure(combined(rewards, alpha))
    for other in args.prm or []:
        theirs = score_with(other)
        table[f"PRM {other}"] = measure(theirs)
        table[f"PRM {other} x exp(1.0 x mean logprob)"] = measure(combined(theirs, 1.0))
    minutes = (time.monotonic() - t0) / 60
    lines = [
        "# Wrong steps: the generator's own confidence beside the PRM "
        "(thinkgate bench step-confidence)",
        "",
        f"{len(questions)} {args.split}-split testbed questions of {args.min_ops}-{args.max_ops} "
        f"operations (seed {args.seed}), {n} answers each at temperature 1 from `base` "
        f"(vLLM in process), {sum(c.correct for c in comps)} of {len(comps)} right; every "
        "thinking line labelled by exact arithmetic. AUROC over each trajectory's lines up "
        "to its first wrong one (what a search's pruning asks), and the mean AUROC within "
        "a question of whole trajectories scored by their lowest line (what its final "
        f"choice asks). {minutes:.1f} min.",
        "",
        "| score of a line | AUROC up to the first wrong line | within a question (min) |",
        "|---|---:|---:|",
        *(f"| {k} | {v['first_error']:.3f} | {v['within']:.3f} |" for k, v in table.items()),
        "",
        "Machine: 2 cores, AMD EPYC, Python 3.11.7, no GPU.",
        "",
        "Command: `.venv/bin/python -m benchmarks.cli step-confidence "
        f"--per-op {args.per_op} --min-ops {args.min_ops} --max-ops {args.max_ops} "
        f"--samples {n} --split {args.split}`",
        "",
    ]
    text = "\n".join(lines)
    out = Path(args.out)
    beside(out, ".md").write_text(text)
    beside(out, ".json").write_text(json.dumps(table, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
