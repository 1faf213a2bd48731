"""A small multiple-choice set for lm-evaluation-harness's log-likelihood path.

Each document is a testbed question with `base`'s greedy thinking style (every step
checked) cut right after a computing line's `=`: the ten digits are the choices, the
running value is the answer. lm-eval scores each choice by the model's log-likelihood
of it after the context (``local-completions``: ``echo``, ``logprobs``, ``max_tokens``
1), so the set measures what a log-likelihood benchmark measures, and gives the same
accuracy through any server that returns the same prompt logprobs.

``python -m testbed.mc_task`` writes ``evals/lm_eval/running_value.jsonl`` (shipped).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Final

from testbed.task import make_questions
from testbed.tokenizer import chat_prompt
from testbed.traces import THOROUGH, classify_line, thinking_lines

DEFAULT_PATH: Final = Path("evals/lm_eval/running_value.jsonl")
CHOICES: Final = [str(d) for d in range(10)]


def documents(n: int = 40, *, seed: int = 11) -> list[dict[str, object]]:
    """``n`` documents (``context``, ``choices``, ``answer`` index), test-split questions
    of 3-9 operations, deterministic in ``seed``."""
    rng = random.Random(seed)
    out: list[dict[str, object]] = []
    for q in make_questions("test", n, seed=seed, min_ops=3, max_ops=9):
        lines, _ = thinking_lines(q, rng, THOROUGH)
        steps = [i for i, line in enumerate(lines) if classify_line(line) == "step"]
        k = rng.choice(steps)
        left, _, value = lines[k].partition("=")
        thinking = "".join(line + "\n" for line in lines[:k]) + left + "="
        out.append(
            {"context": chat_prompt(q.prompt) + thinking, "choices": CHOICES, "answer": int(value)}
        )
    return out


def write(path: Path = DEFAULT_PATH, n: int = 40, *, seed: int = 11) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d) + "\n" for d in documents(n, seed=seed)))
    return path


if __name__ == "__main__":
    print(write())
