"""The testbed as the server's default model (entry point ``thinkgate.defaults``: the
runtime reads it through ``core.defaults.installed()`` and never imports the testbed),
with the questions ``thinkgate calibrate auto`` measures it on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from testbed import model_path

# The validation split's 8-12-operation questions the shipped auto table was calibrated
# on (the test split is the budgets benchmark's). Written once by
# `python -c "from testbed.defaults import write_calibration_questions as w; w()"`.
CALIBRATION_QUESTIONS: Final = Path(__file__).resolve().parent / "calibration_questions.jsonl"
# Enough for every documented calibration (`--questions 72`); the first N of them are
# `make_questions("validation", N, seed=0, min_ops=8, max_ops=12)` for any N up to it.
CALIBRATION_COUNT: Final = 72


def defaults() -> dict[str, object]:
    return {
        "model": str(model_path("base")),
        "served_name": "testbed-base",
        "reward_model": str(model_path("reward")),
        "prm_model": str(model_path("prm")),
        "step_delimiter": "\n",  # one thinking line is one step
        # Served with a context long enough for an agent harness's first request (its
        # config declares 65,536 positions; its answers past its 512 trained ones are
        # poor, the protocol holds), and its efforts sized by the 512 it thinks within.
        "max_model_len": 65536,  # a replica's vLLM flag
        "effort_context": 512,
        # A request without max_tokens stops here, not at the 65,536th position: offered
        # tools it may never stop (minutes on a CPU); twice the 512 it was trained on.
        "max_tokens": 1024,
        "calibration_questions": str(CALIBRATION_QUESTIONS),
    }


def calibration_lines(n: int = CALIBRATION_COUNT) -> list[str]:
    """The calibration questions file's lines: ``prompt`` and ``answer`` of each."""
    from testbed.task import make_questions

    qs = make_questions("validation", n, seed=0, min_ops=8, max_ops=12)
    return [json.dumps({"prompt": q.prompt, "answer": str(q.answer)}) for q in qs]


def write_calibration_questions(path: Path = CALIBRATION_QUESTIONS) -> None:
    path.write_text("".join(f"{line}\n" for line in calibration_lines()))
