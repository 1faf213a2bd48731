"""Evaluation of testbed models through the vLLM engine, on the test split."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from testbed import MODELS_DIR, portable_path
from testbed.engine import Completion, classify, generate, generate_with_cut, load_llm, reward_text
from testbed.metrics import (
    accuracy_by_ops,
    auroc,
    by_ops,
    line_stats,
    majority,
    range_mean,
    thinking_by_ops,
)
from testbed.model import read_card, write_card
from testbed.task import MAX_OPS, MIN_OPS, Question, make_questions

if TYPE_CHECKING:
    from vllm import LLM

CUT_POINTS = (2, 4, 6, 8, 12, 16)


@dataclass(frozen=True, slots=True)
class EvalSettings:
    per_ops: int = 10  # test questions per difficulty
    samples: int = 16  # temperature-1 samples per question
    temperature: float = 1.0
    seed: int = 0
    cut: bool = False
    cut_points: tuple[int, ...] = CUT_POINTS
    reward_samples: int = 4  # sampled answers per question scored by a reward model


def test_questions(per_ops: int, seed: int) -> list[Question]:
    """The same `per_ops` test questions at every difficulty, for a given seed."""
    out: list[Question] = []
    for ops in range(MIN_OPS, MAX_OPS + 1):
        out += make_questions("test", per_ops, seed=seed, min_ops=ops, max_ops=ops)
    return out


def _keys(table: dict[int, float]) -> dict[str, float]:
    return {str(k): round(v, 4) for k, v in table.items()}


def greedy_report(llm: LLM, questions: list[Question]) -> dict[str, object]:
    done = [c[0] for c in generate(llm, questions)]
    acc = accuracy_by_ops(done)
    think = thinking_by_ops(done)
    return {
        "accuracy": _keys(acc),
        "thinking_tokens": _keys(think),
        "acc_1_4": round(range_mean(acc, 1, 4), 4),
        "acc_5_8": round(range_mean(acc, 5, 8), 4),
        "acc_9_12": round(range_mean(acc, 9, 12), 4),
        "acc_6_12": round(range_mean(acc, 6, 12), 4),
        "thinking_ratio_12_over_2": round(think.get(12, 0.0) / max(1e-9, think.get(2, 0.0)), 3),
        "lines": line_stats(done).as_dict(),
    }


def sampled_report(
    llm: LLM, questions: list[Question], settings: EvalSettings
) -> tuple[dict[str, object], list[list[Completion]]]:
    groups = generate(llm, questions, n=settings.samples, temperature=settings.temperature)
    flat = [c for g in groups for c in g]
    single = accuracy_by_ops(flat)
    vote = by_ops(
        (g[0].question.ops, float(majority(c.answer for c in g) == g[0].question.answer))
        for g in groups
    )
    report: dict[str, object] = {
        "temperature": settings.temperature,
        "samples": settings.samples,
        "accuracy_single": _keys(single),
        "accuracy_majority": _keys(vote),
        "thinking_tokens": _keys(thinking_by_ops(flat)),
        "single_6_12": round(range_mean(single, 6, 12), 4),
        "majority_6_12": round(range_mean(vote, 6, 12), 4),
        "lines": line_stats(flat).as_dict(),
    }
    return report, groups


def cut_report(llm: LLM, questions: list[Question], points: tuple[int, ...]) -> dict[str, object]:
    curve: dict[str, object] = {}
    for per_op in points:
        done = generate_with_cut(llm, questions, tokens_per_op=per_op)
        acc = accuracy_by_ops(done)
        curve[str(per_op)] = {
            "accuracy": _keys(acc),
            "acc_1_5": round(range_mean(acc, 1, 5), 4),
            "acc_6_12": round(range_mean(acc, 6, 12), 4),
            # Budget forcing needs an answer after the forced `</think>`, right or not.
            "answered": round(sum(c.answer is not None for c in done) / len(done), 4),
        }
    return {"tokens_per_op": curve}


def reward_report(rm: LLM, groups: list[list[Completion]], per_question: int) -> dict[str, object]:
    picked = [c for g in groups for c in g[:per_question]]
    scores = classify(rm, [reward_text(c.question, c.text) for c in picked])
    labels = [c.correct for c in picked]
    return {
        "auroc": round(auroc(scores, labels), 4),
        "responses": len(picked),
        "right": sum(labels),
        "mean_score_right": round(
            sum(s for s, y in zip(scores, labels, strict=True) if y) / max(1, sum(labels)), 4
        ),
        "mean_score_wrong": round(
            sum(s for s, y in zip(scores, labels, strict=True) if not y)
            / max(1, len(labels) - sum(labels)),
            4,
        ),
    }


def is_reward_model(model_dir: Path) -> bool:
    config = json.loads((model_dir / "config.json").read_text())
    return "Qwen2ForSequenceClassification" in config.get("architectures", [])


def evaluate_model(
    model_dir: Path, settings: EvalSettings, *, reward_dir: Path | None = None
) -> dict[str, object]:
    """The full report for one generator (and optionally a reward model scoring its samples)."""
    start = time.monotonic()
    questions = test_questions(settings.per_ops, settings.seed)
    llm = load_llm(model_dir, seed=settings.seed)
    report: dict[str, object] = {
        "model": str(model_dir),
        "split": "test",
        "questions_per_difficulty": settings.per_ops,
        "seed": settings.seed,
        "engine": "vllm (CPU, float32, enforce_eager)",
    }
    report["greedy"] = greedy_report(llm, questions)
    sampled, groups = sampled_report(llm, questions, settings)
    report["sampled"] = sampled
    if settings.cut:
        report["cut"] = cut_report(llm, questions, settings.cut_points)
    if reward_dir is not None:
        rm = load_llm(reward_dir, runner="pooling", seed=settings.seed)
        report["reward"] = {
            "model": str(reward_dir),
            **reward_report(rm, groups, settings.reward_samples),
        }
    report["eval_wall_s"] = round(time.monotonic() - start, 1)
    return report


def format_report(report: dict[str, object]) -> str:
    greedy = report["greedy"]
    sampled = report["sampled"]
    assert isinstance(greedy, dict) and isinstance(sampled, dict)
    lines = [
        f"model {report['model']} (test split, {report['questions_per_difficulty']}/difficulty)"
    ]
    lines.append("ops  greedy  think   T=1.0  maj@16  think@T")
    for ops in range(MIN_OPS, MAX_OPS + 1):
        k = str(ops)
        lines.append(
            f"{ops:>3}  {greedy['accuracy'].get(k, float('nan')):6.2f}  "
            f"{greedy['thinking_tokens'].get(k, float('nan')):5.1f}   "
            f"{sampled['accuracy_single'].get(k, float('nan')):5.2f}  "
            f"{sampled['accuracy_majority'].get(k, float('nan')):6.2f}  "
            f"{sampled['thinking_tokens'].get(k, float('nan')):6.1f}"
        )
    lines.append(
        f"greedy 1-4 {greedy['acc_1_4']:.3f}  5-8 {greedy['acc_5_8']:.3f}  "
        f"9-12 {greedy['acc_9_12']:.3f}  thinking 12/2 {greedy['thinking_ratio_12_over_2']}"
    )
    lines.append(
        f"6-12: greedy {greedy['acc_6_12']:.3f}  T=1 single {sampled['single_6_12']:.3f}  "
        f"majority {sampled['majority_6_12']:.3f}"
    )
    lines.append(f"sampled lines: {json.dumps(sampled['lines'])}")
    cut = report.get("cut")
    if isinstance(cut, dict):
        lines.append("thinking cut (tokens per op): accuracy 1-5 / 6-12, share answered")
        for per_op, row in cut["tokens_per_op"].items():
            answered = row.get("answered")  # absent from cards written before it existed
            tail = f"  {answered:.3f}" if isinstance(answered, float) else ""
            lines.append(f"  {per_op:>3}/op  {row['acc_1_5']:.3f} / {row['acc_6_12']:.3f}{tail}")
    reward = report.get("reward")
    if isinstance(reward, dict):
        lines.append(f"reward AUROC {reward['auroc']} on {reward['responses']} sampled answers")
    return "\n".join(lines)


def is_process_reward_model(model_dir: Path) -> bool:
    config = json.loads((model_dir / "config.json").read_text())
    return "Qwen2ForProcessRewardModel" in config.get("architectures", [])


def run_prm_eval_command(args: argparse.Namespace) -> int:
    """The PRM beside the outcome reward model, on the same samples (testbed.prm_eval)."""
    from testbed.prm_eval import PrmEvalSettings, evaluate_prm, format_prm_report

    model_dir: Path = args.model
    config = json.loads((model_dir / "config.json").read_text())
    reward_dir: Path = args.reward if args.reward is not None else MODELS_DIR / "reward"
    settings = PrmEvalSettings(samples=args.samples, seed=5 if args.seed is None else args.seed)
    if args.ops is not None:
        settings = replace(settings, min_ops=args.ops[0], max_ops=args.ops[1])
    if args.per_op is not None:
        settings = replace(settings, per_op=args.per_op)
    report = evaluate_prm(
        portable_path(model_dir),
        portable_path(MODELS_DIR / "base"),
        portable_path(reward_dir) if (reward_dir / "config.json").exists() else None,
        settings,
        step_tag_id=int(config["step_tag_id"]),
    )
    print(format_prm_report(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.card:
        card = read_card(model_dir)
        card["eval"] = {**report, "command": " ".join(args.argv_for_card)}
        write_card(model_dir, card)
    return 0


def run_eval_command(args: argparse.Namespace) -> int:
    model_dir: Path = args.model
    if is_process_reward_model(model_dir):
        return run_prm_eval_command(args)
    reward_dir: Path | None = args.reward
    generator = model_dir
    if is_reward_model(model_dir):
        reward_dir, generator = model_dir, portable_path(MODELS_DIR / "base")
    settings = EvalSettings(
        per_ops=max(1, args.n // (MAX_OPS - MIN_OPS + 1)),
        samples=args.samples,
        seed=0 if args.seed is None else args.seed,
        cut=args.cut,
    )
    report = evaluate_model(generator, settings, reward_dir=reward_dir)
    print(format_report(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.card:
        command = " ".join(args.argv_for_card)
        card = read_card(model_dir)
        if reward_dir == model_dir:
            # The reward card keeps only what it measures; the generator has its own card.
            keep = ("split", "questions_per_difficulty", "seed", "engine", "reward")
            card["eval"] = {
                "generator": report["model"],
                **{k: report[k] for k in keep},
                "scored": f"{settings.reward_samples} T={settings.temperature} samples "
                "per test question from the generator",
                "command": command,
            }
        else:
            card["eval"] = {**report, "command": command}
            versus = versus_base_under_cut(report, read_card(MODELS_DIR / "base"))
            if versus is not None and model_dir.resolve() != (MODELS_DIR / "base").resolve():
                card["vs_base_under_cut"] = versus
        write_card(model_dir, card)
    return 0


def versus_base_under_cut(
    report: dict[str, object], base_card: dict[str, object]
) -> dict[str, object] | None:
    """Accuracy on 6-12 ops under each thinking cut, this model against `base`'s card.

    Only when both ran the cut curve on the same questions (same split, size and seed).
    """
    base_eval = base_card.get("eval")
    if not isinstance(base_eval, dict):
        return None
    same = ("split", "questions_per_difficulty", "seed")
    if any(base_eval.get(k) != report.get(k) for k in same):
        return None
    mine, theirs = report.get("cut"), base_eval.get("cut")
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return None
    rows: dict[str, object] = {}
    for per_op, row in mine["tokens_per_op"].items():
        other = theirs["tokens_per_op"].get(per_op)
        if other is None:
            continue
        rows[per_op] = {
            "base": other["acc_6_12"],
            "this": row["acc_6_12"],
            "points": round(100 * (row["acc_6_12"] - other["acc_6_12"]), 1),
        }
    return {
        "acc_6_12_by_tokens_per_op": rows,
        "note": "eval.cut of this card against testbed/models/base/card.json "
        "(same test questions, same seed)",
    }
