"""Budget guidance vs hard cut vs unconstrained: accuracy at matched thinking tokens.

ONE vLLM engine (testbed ``base`` loaded as the budget-guidance wrapper, with both our
processors: budget guidance and Elastic Reasoning) answers the same held-out questions
(testbed test split, difficulty 1..12) for every method:

  unconstrained   the model as it is
  guidance@B      budget guidance toward B thinking tokens (soft; may overrun B)
  guidance-nomask the same without the paper's reliability mask (body `guidance_mask:
                  false`): its fixed thresholds (lambda >= 10, ...) come from a model
                  thinking thousands of tokens; on the testbed's short traces they
                  zero even the right token (docs/budget-guidance.md)
  hard-cut@t      Elastic Reasoning's processor forces ``</think>`` after t thinking
                  tokens (the answer then runs free), t on the same grid

Hard cut and guidance are compared at matched mean thinking tokens: the hard-cut curve
is interpolated at each guidance point's mean. "within B" is the share of requests whose
thinking closed within B tokens. Greedy by default (``--temperature`` for sampling).
Writes ``benchmarks/results/guidance/guidance.{md,png,json}``.

    .venv/bin/python -m benchmarks.guidance [--per-op 8] [--budgets 16,32,48,64,96,128]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.out_paths import results_of

ROOT = Path(__file__).resolve().parents[1]
RESULTS = results_of("guidance")
MAX_TOKENS = 440


@dataclass(frozen=True, slots=True)
class _Row:
    method: str
    budget: int | None
    accuracy: float
    mean_thinking: float
    mean_tokens: float
    within_budget: float | None  # share whose thinking closed within the budget
    closed: float  # share whose thinking closed at all
    check_lines: float  # redundant `check` lines per response
    seconds: float


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", type=Path, default=ROOT / "testbed" / "models" / "base")
    p.add_argument("--per-op", type=int, default=8, help="questions per difficulty 1..12")
    p.add_argument("--budgets", default="16,32,48,64,96,128")
    p.add_argument(
        "--cut-extra", default="0,4,8", help="extra hard-cut points (low tokens, for matching)"
    )
    p.add_argument(
        "--masks", default="on,off", help="guidance rows with the reliability mask on / off"
    )
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=RESULTS)
    return p


def _run(args: argparse.Namespace) -> list[_Row]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from kernels.elastic import args as elastic_args
    from kernels.elastic.vllm_v1 import ElasticLogitsProcessor
    from kernels.guidance import args as guidance_args
    from kernels.guidance.plugin import hf_overrides
    from kernels.guidance.vllm_v1 import BudgetGuidanceLogitsProcessor
    from kernels.offline_engine import cpu_llm
    from testbed.task import Question, make_questions, parse_answer_for_eval
    from testbed.tokenizer import CharCodec, chat_prompt

    codec = CharCodec()
    questions: list[Question] = []
    for ops in range(1, 13):
        questions += make_questions("test", args.per_op, seed=args.seed, min_ops=ops, max_ops=ops)
    prompts = [
        TokensPrompt(prompt_token_ids=codec.encode(chat_prompt(q.prompt))) for q in questions
    ]
    llm = cpu_llm(
        args.model,
        seed=args.seed,
        hf_overrides=hf_overrides(),
        logits_processors=[BudgetGuidanceLogitsProcessor, ElasticLogitsProcessor],
    )

    def measure(method: str, budget: int | None, extra: dict[str, Any]) -> _Row:
        params = SamplingParams(
            temperature=args.temperature,
            max_tokens=MAX_TOKENS,
            seed=args.seed if args.temperature > 0 else None,
            extra_args=extra or None,
        )
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        correct = thinking = tokens = within = closed = checks = 0
        for q, out in zip(questions, outs, strict=True):
            ids = list(out.outputs[0].token_ids)
            tokens += len(ids)
            if codec.think_end_id in ids:
                cut = ids.index(codec.think_end_id)
                closed += 1
                answer = parse_answer_for_eval(codec.decode(ids[cut + 1 :]))
                if budget is not None and cut <= budget:
                    within += 1
            else:
                cut, answer = len(ids), None
            thinking += cut
            checks += codec.decode(ids[:cut]).count("check")
            correct += int(answer == q.answer)
        n = len(questions)
        return _Row(
            method=method,
            budget=budget,
            accuracy=correct / n,
            mean_thinking=thinking / n,
            mean_tokens=tokens / n,
            within_budget=within / n if budget is not None else None,
            closed=closed / n,
            check_lines=checks / n,
            seconds=round(seconds, 2),
        )

    def hard(t: int) -> dict[str, Any]:
        return {
            elastic_args.THINKING_BUDGET: t,
            elastic_args.THINK_END_ID: codec.think_end_id,
            elastic_args.EOS_ID: codec.eos_id,
        }

    budgets = [int(b) for b in args.budgets.split(",")]
    extra_cuts = [int(t) for t in args.cut_extra.split(",") if t.strip()]
    rows = [measure("unconstrained", None, {})]
    for t in extra_cuts:
        rows.append(measure("hard-cut", t, hard(t)))
    masks = [m.strip() for m in args.masks.split(",") if m.strip()]
    for b in budgets:
        for m in masks:
            method = "guidance" if m == "on" else "guidance-nomask"
            rows.append(measure(method, b, guidance_args.extra_args(b, mask=m == "on")))
            print(rows[-1], flush=True)
        rows.append(measure("hard-cut", b, hard(b)))
        print(rows[-1], flush=True)
    return rows


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> float | None:
    """Piecewise-linear y at x over points sorted by x; None outside their range."""
    pts = sorted(points)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def _report(rows: Sequence[_Row], args: argparse.Namespace, wall_s: float) -> str:
    hard = [(r.mean_thinking, r.accuracy) for r in rows if r.method == "hard-cut"]
    base = next(r for r in rows if r.method == "unconstrained")
    lines = [
        "# Budget guidance vs hard cut (testbed `base`)",
        "",
        f"{len(_questions_of(args))} test-split questions (difficulty 1..12, {args.per_op} each), "
        f"temperature {args.temperature}, one vLLM engine (CPU) with the budget-guidance "
        "wrapper and both processors; hard cut = the Elastic processor forcing `</think>` "
        "at t. `hard-cut acc @ same tokens` interpolates the hard-cut curve at the "
        "guidance row's mean thinking tokens. `guidance` is the paper's rule with its "
        "reliability mask (the server's default); `guidance-nomask` sends "
        "`guidance_mask: false`.",
        "",
        "| method | B / t | accuracy | mean thinking | within B | closed | check lines "
        "| hard-cut acc @ same tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        matched = ""
        if r.method.startswith("guidance"):
            m = _interpolate(hard, r.mean_thinking)
            if m is None and r.mean_thinking >= max(h[0] for h in hard):
                m = _interpolate([*hard, (base.mean_thinking, base.accuracy)], r.mean_thinking)
            matched = f"{m:.3f}" if m is not None else "n/a"
        within = f"{r.within_budget:.2f}" if r.within_budget is not None else ""
        lines.append(
            f"| {r.method} | {r.budget if r.budget is not None else '-'} | {r.accuracy:.3f} "
            f"| {r.mean_thinking:.1f} | {within} | {r.closed:.2f} | {r.check_lines:.2f} "
            f"| {matched} |"
        )
    lines += [
        "",
        f"Wall time {wall_s:.0f} s on {platform.machine()} ({os.cpu_count()} cores, shared). "
        "Command: `.venv/bin/python -m benchmarks.guidance "
        f"--per-op {args.per_op} --budgets {args.budgets} --cut-extra {args.cut_extra} "
        f"--masks {args.masks} --temperature {args.temperature}`.",
    ]
    return "\n".join(lines) + "\n"


def _questions_of(args: argparse.Namespace) -> list[object]:
    return [None] * (12 * args.per_op)


def plot(rows: Sequence[_Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    styles = (("guidance", "o-"), ("guidance-nomask", "^-"), ("hard-cut", "s--"))
    for method, style in styles:
        pts = sorted((r.mean_thinking, r.accuracy, r.budget) for r in rows if r.method == method)
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=method)
        for x, y, b in pts:
            ax.annotate(str(b), (x, y), textcoords="offset points", xytext=(3, -10), fontsize=7)
    base = next(r for r in rows if r.method == "unconstrained")
    ax.plot([base.mean_thinking], [base.accuracy], "k*", markersize=12, label="unconstrained")
    ax.set_xlabel("mean thinking tokens per question")
    ax.set_ylabel("accuracy")
    ax.set_title("testbed base: budget guidance vs hard cut (labels: B / t)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    t0 = time.perf_counter()
    rows = _run(args)
    wall = time.perf_counter() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    md = _report(rows, args, wall)
    (args.out / "guidance.md").write_text(md)
    (args.out / "guidance.json").write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(args).items()}, "rows": [asdict(r) for r in rows]},
            indent=2,
        )
    )
    plot(rows, args.out / "guidance.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
