"""The `base` recipe's gate: greedy accuracy on long validation questions, in process.

A fresh run of the recipe usually learns to find the next operand of the question
reliably, but not always: of six runs (testbed/README.md), three were right on every 9-12
operation test question greedily, two on 0.78 and one on 0.13 (lookups late in long
questions went astray). Greedy decoding of `base` checks every step, so at 9-12
operations it writes the longest traces the model ever meets, and such a run shows
there first. The recipe measures it here (transformers' generate, a few seconds, no vLLM
engine) and retrains from scratch with another seed when it falls short.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

import torch
from transformers import Qwen2ForCausalLM

from kernels.offline_engine import MAX_MODEL_LEN
from testbed.engine import to_completion
from testbed.task import Question, make_questions
from testbed.tokenizer import CharCodec, chat_prompt

GATE_MIN_OPS: Final = 9
GATE_MAX_OPS: Final = 12
GATE_PER_OPS: Final = 25
# Good runs score 1.0 here; the weak ones 0.8 and below.
GATE_ACCURACY: Final = 0.9


@dataclass(frozen=True, slots=True)
class GreedyCheck:
    questions: int
    min_ops: int
    max_ops: int
    accuracy: float
    bar: float

    @property
    def passed(self) -> bool:
        return self.accuracy >= self.bar

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "accuracy": round(self.accuracy, 4), "passed": self.passed}


def gate_questions(
    per_ops: int = GATE_PER_OPS, min_ops: int = GATE_MIN_OPS, max_ops: int = GATE_MAX_OPS
) -> list[Question]:
    """Validation questions (never test ones: the cards' numbers stay unseen)."""
    out: list[Question] = []
    for ops in range(min_ops, max_ops + 1):
        out += make_questions("validation", per_ops, seed=0, min_ops=ops, max_ops=ops)
    return out


def greedy_accuracy(model_dir: Path, questions: list[Question], *, threads: int = 2) -> float:
    """Share of `questions` the model at `model_dir` answers right greedily."""
    torch.set_num_threads(threads)
    codec = CharCodec()
    model = Qwen2ForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).train(False)
    prompts = [codec.encode(chat_prompt(q.prompt)) for q in questions]
    width = max(len(p) for p in prompts)
    # Left padding: every row's next token comes from the same column.
    ids = torch.full((len(prompts), width), codec.pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=MAX_MODEL_LEN - width,
            pad_token_id=codec.pad_id,
            eos_token_id=codec.eos_id,
        )
    right = 0
    for question, row in zip(questions, out[:, width:].tolist(), strict=True):
        ids_row = row[: row.index(codec.eos_id) + 1] if codec.eos_id in row else row
        right += to_completion(codec, question, ids_row).correct
    return right / len(questions)


def greedy_check(
    model_dir: Path,
    *,
    per_ops: int = GATE_PER_OPS,
    bar: float = GATE_ACCURACY,
    threads: int = 2,
) -> GreedyCheck:
    questions = gate_questions(per_ops)
    return GreedyCheck(
        questions=len(questions),
        min_ops=GATE_MIN_OPS,
        max_ops=GATE_MAX_OPS,
        accuracy=greedy_accuracy(model_dir, questions, threads=threads),
        bar=bar,
    )
