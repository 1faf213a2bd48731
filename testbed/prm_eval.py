"""The process reward model measured through vLLM, beside the outcome reward model.

`python -m testbed eval --model testbed/models/prm [--card]` samples 16 answers at
temperature 1 from `base` for 10 test-split questions of each of 9-12 operations (seed
5: the questions and samples of `thinkgate bench reward-ranking`, which measured the
outcome reward model's 0.55 within a question), then scores the same samples with both
models, one vLLM engine at a time:

* step-level AUROC: every thinking line's reward against its exact-arithmetic label
  (`testbed.prm_labels`);
* ranking of full trajectories within one question (what a search or Best-of-N needs):
  the mean over questions with both right and wrong answers of the AUROC of a
  trajectory's score against whether its answer is right. The PRM's score is the min or
  the last of its thinking lines' rewards (or the reward at the tag after `</think>`);
  the outcome reward model's is its raw logit on the whole response, as in the bench;
* picking an answer (what decides a strategy's accuracy): each question's samples cut
  into disjoint pools of 4, 8 and 16, the accuracy of the majority, of the PRM-weighted
  vote (the class of largest summed score, best-of-n's `select: vote`), of the sample of
  best score, and pass@k (some sample right: what a perfect verifier could pick). An
  AUROC over pairs can be high while the best-scored of eight is often a wrong one. A
  sample's score is what `scorer: prm` serves: its lowest step reward, the end tag's
  included.

`--ops 12-13 --per-op 50` asks it of the search bench's questions. The samples are
seeded (engine seed 0, request seed = the question seed): two PRMs evaluated with the
same settings score the same samples.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from testbed.engine import Completion, classify, generate, load_llm, reward_text
from testbed.metrics import auroc, majority
from testbed.prm import Example, example, first_error_auroc
from testbed.task import Question, make_questions
from testbed.tokenizer import CharCodec, chat_prompt

if TYPE_CHECKING:
    from vllm import LLM

AGGREGATES: Final = ("min", "last", "end")
POOLS: Final = (4, 8, 16)


@dataclass(frozen=True, slots=True)
class PrmEvalSettings:
    per_op: int = 10
    samples: int = 16
    min_ops: int = 9
    max_ops: int = 12
    seed: int = 5  # of the questions (the engines' seed is 0, as in the bench)


def eval_questions(settings: PrmEvalSettings) -> list[Question]:
    out: list[Question] = []
    for ops in range(settings.min_ops, settings.max_ops + 1):
        out += make_questions("test", settings.per_op, seed=settings.seed, min_ops=ops, max_ops=ops)
    return out


def load_prm(model_dir: Path | str, *, step_tag_id: int, seed: int = 0) -> LLM:
    """An offline pooling engine with STEP pooling at ``step_tag_id`` (vLLM's default
    step tag is Qwen2.5-Math-PRM's `<extra_0>`, so the engine must be told)."""
    from vllm.config import PoolerConfig

    return load_llm_pooling(model_dir, PoolerConfig(step_tag_id=step_tag_id), seed=seed)


def load_llm_pooling(model_dir: Path | str, pooler_config: object, *, seed: int) -> LLM:
    from kernels.offline_engine import MAX_MODEL_LEN, cpu_llm

    return cpu_llm(
        model_dir,
        runner="pooling",
        seed=seed,
        max_model_len=MAX_MODEL_LEN,
        pooler_config=pooler_config,
    )


def prm_rewards(prm: LLM, rows: Sequence[Example], *, prompt_tags: int) -> list[list[float]]:
    """P(right) at each labeled tag of each row (the prompt's own tags dropped)."""
    from vllm.inputs import TokensPrompt

    outs = prm.encode(
        [TokensPrompt(prompt_token_ids=list(r.ids)) for r in rows],
        pooling_task="token_classify",
        use_tqdm=False,
    )
    return [[float(x) for x in o.outputs.data[prompt_tags:, 1].tolist()] for o in outs]


def trajectory_score(rewards: Sequence[float], row: Example, how: str) -> float:
    """A trajectory's score from its rewards: `min` / `last` over thinking lines, or
    `end` (the tag after `</think>`, else the last line's). No line: 1.0 (nothing is
    wrong so far, as strategies.prm.aggregate)."""
    lines = list(rewards[: row.lines])
    if how == "end":
        if len(rewards) > row.lines:
            return rewards[row.lines]
        how = "last"
    if not lines:
        return 1.0
    return min(lines) if how == "min" else lines[-1]


def within_question(
    groups: Sequence[Sequence[float]], labels: Sequence[Sequence[bool]]
) -> tuple[float, int]:
    """Mean AUROC within a question over questions with both kinds, and how many."""
    aucs = [
        auroc(list(s), list(y)) for s, y in zip(groups, labels, strict=True) if 0 < sum(y) < len(y)
    ]
    return (statistics.mean(aucs) if aucs else float("nan")), len(aucs)


def selection(
    groups: Sequence[Sequence[Completion]], scores: Sequence[float], pools: Sequence[int] = POOLS
) -> dict[str, dict[str, float]]:
    """Accuracy % per pool size of majority, PRM-weighted vote, best score and pass@k,
    each question's samples cut into disjoint pools of that size (``scores`` flat, in
    the order of ``groups``)."""
    out: dict[str, dict[str, float]] = {}
    size = len(groups[0]) if groups else 0
    for k in pools:
        if k > size:
            continue
        hits: Counter[str] = Counter()
        count = 0
        for group, group_scores in zip(groups, _regroup(scores, size), strict=True):
            for start in range(0, size - k + 1, k):
                pool = group[start : start + k]
                weights = group_scores[start : start + k]
                answers = [c.answer for c in pool]
                truth = pool[0].question.answer
                count += 1
                hits["pass_at_k"] += any(c.correct for c in pool)
                hits["majority"] += majority(answers) == truth
                hits["prm_vote"] += majority(answers, weights) == truth
                hits["prm_best"] += pool[max(range(k), key=weights.__getitem__)].correct
        out[str(k)] = {
            name: round(100.0 * hits[name] / count, 1)
            for name in ("majority", "prm_vote", "prm_best", "pass_at_k")
        }
        out[str(k)]["pools"] = count
    return out


def _regroup(flat: Sequence[float], size: int) -> list[list[float]]:
    return [list(flat[i : i + size]) for i in range(0, len(flat), size)]


def evaluate_prm(
    prm_dir: Path,
    base_dir: Path,
    reward_dir: Path | None,
    settings: PrmEvalSettings,
    *,
    step_tag_id: int,
) -> dict[str, object]:
    start = time.monotonic()
    codec = CharCodec()
    questions = eval_questions(settings)
    base = load_llm(base_dir, seed=0)
    groups = generate(base, questions, n=settings.samples, temperature=1.0, seed=settings.seed)
    del base
    flat: list[Completion] = [c for g in groups for c in g]
    rows = [example(codec, c) for c in flat]
    right = [[c.correct for c in g] for g in groups]
    report: dict[str, object] = {
        "generator": str(base_dir),
        "split": "test",
        "questions": len(questions),
        "ops": f"{settings.min_ops}-{settings.max_ops}",
        "samples_per_question": settings.samples,
        "question_seed": settings.seed,
        "engine": "vllm (CPU, float32, enforce_eager); token_classify, STEP pooling",
        "answers_right": sum(c.correct for c in flat),
        "answers": len(flat),
    }
    # The chat template's own newlines: the same for every testbed prompt.
    prompt_tags = codec.encode(chat_prompt(questions[0].prompt)).count(step_tag_id)
    prm = load_prm(prm_dir, step_tag_id=step_tag_id)
    rewards = prm_rewards(prm, rows, prompt_tags=prompt_tags)
    del prm
    step_s = [s for r, row in zip(rewards, rows, strict=True) for s in r[: row.lines]]
    step_y = [y for row in rows for y in row.labels[: row.lines]]
    prm_part: dict[str, object] = {
        "model": str(prm_dir),
        "step_auroc": round(auroc(step_s, step_y), 4),
        "steps": len(step_y),
        "steps_wrong": sum(1 for y in step_y if not y),
        # What a step search asks: the steps up to each trajectory's first wrong one.
        "first_error_auroc": round(first_error_auroc(rewards, rows), 4),
    }
    for how in AGGREGATES:
        scores = [trajectory_score(r, row, how) for r, row in zip(rewards, rows, strict=True)]
        mean, n = within_question(_regroup(scores, settings.samples), right)
        prm_part[f"within_question_auroc_{how}"] = round(mean, 4)
        prm_part[f"answer_auroc_{how}"] = round(auroc(scores, [c.correct for c in flat]), 4)
        prm_part["questions_with_both"] = n
    # A sample's score as `scorer: prm` serves it: the lowest reward of its steps, the
    # end tag's included (the closing step of a sample whose thinking closed).
    served = [min(r) if r else 1.0 for r in rewards]
    prm_part["selection"] = selection(groups, served)
    report["prm"] = prm_part
    if reward_dir is not None:
        rm = load_llm(reward_dir, runner="pooling", seed=0)
        orm = classify(rm, [reward_text(c.question, c.text) for c in flat])
        del rm
        mean, n = within_question(_regroup(orm, settings.samples), right)
        report["orm"] = {
            "model": str(reward_dir),
            "within_question_auroc": round(mean, 4),
            "answer_auroc": round(auroc(orm, [c.correct for c in flat]), 4),
            "questions_with_both": n,
        }
    report["eval_wall_s"] = round(time.monotonic() - start, 1)
    return report


def format_prm_report(report: dict[str, object]) -> str:
    prm = report["prm"]
    assert isinstance(prm, dict)
    lines = [
        f"{report['answers']} answers ({report['answers_right']} right) to "
        f"{report['questions']} test questions ({report['ops']} ops)",
        f"PRM step-level AUROC {prm['step_auroc']} on {prm['steps']} steps "
        f"({prm['steps_wrong']} wrong); up to each first wrong step "
        f"{prm.get('first_error_auroc')}",
        f"within a question ({prm['questions_with_both']} questions with both kinds): "
        f"PRM min {prm['within_question_auroc_min']}  last {prm['within_question_auroc_last']}"
        f"  end {prm['within_question_auroc_end']}",
    ]
    picks = prm.get("selection") or {}
    for k, row in picks.items():
        lines.append(
            f"pools of {k} ({row['pools']:g}): majority {row['majority']}  PRM vote "
            f"{row['prm_vote']}  PRM best {row['prm_best']}  pass@{k} {row['pass_at_k']}"
        )
    orm = report.get("orm")
    if isinstance(orm, dict):
        lines.append(f"ORM within a question {orm['within_question_auroc']}")
    return "\n".join(lines)
