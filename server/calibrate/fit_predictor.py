"""``thinkgate fit``'s budget predictor: budget guidance's predictor trained on the model's
own traces of the workload's fit part (``thinkgate train-predictor --prompts``), written
into the profile (``DIR/bg_predictor/``), where ``thinkgate serve --profile DIR`` and
``thinkgate replica --profile DIR`` load it in place of the model's own.

It runs after the measurements, once the fit's server has stopped (drawing the traces
starts an engine of its own), with its own time: ``--predictor-traces`` traces and
``--predictor-minutes`` of training. It is left out, with the reason in the profile, for
a server given by URL (the weights are where that server is: the profile holds the
prompts and the command to run there), a model whose server refuses thinking budgets
(no think tags: nothing to guide), or an architecture the guidance wrapper does not wrap.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from server.calibrate.workload import WorkQuestion

PROMPTS_FILE: Final = "predictor-prompts.jsonl"
WRAPPED: Final = ("Qwen2ForCausalLM", "BGQwen2ForCausalLM")  # kernels.guidance.model


@dataclass(frozen=True, slots=True)
class PredictorFit:
    trained: bool
    reason: str | None = None  # why not
    metrics: dict[str, object] | None = None  # the held-out figures train-predictor wrote
    failed: bool = False  # it was to be trained, and its training failed


def write_prompts(out: Path, fit: list[WorkQuestion]) -> Path:
    path = out / PROMPTS_FILE
    path.write_text("".join(json.dumps({"messages": q.chat()}) + "\n" for q in fit))
    return path


def why_not(model_dir: str | None, refused: dict[str, str]) -> str | None:
    """Why no predictor can be trained here (None: it can)."""
    if model_dir is None:
        return (
            "the server was given by URL: on its host, run `thinkgate train-predictor --model "
            f"DIR --prompts {PROMPTS_FILE} --out PROFILE`"
        )
    if "budget-guidance (thinking budget)" in refused and "elastic (thinking budget)" in refused:
        return "the server refuses thinking budgets (a model without think tags)"
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return f"{model_dir} is not a model directory with a config.json"
    archs = config.get("architectures") or []
    if not set(archs) & set(WRAPPED):
        return f"budget guidance wraps {', '.join(WRAPPED[:1])} models only, not {archs}"
    return None


def train(
    model_dir: str, out: Path, prompts: Path, *, traces: int, minutes: float, seed: int
) -> PredictorFit:
    """Run ``thinkgate train-predictor`` on ``prompts`` into ``out/bg_predictor``."""
    cmd = [sys.executable, "-m", "server.cli", "train-predictor", "--model", model_dir]
    cmd += ["--prompts", str(prompts), "--out", str(out), "--traces", str(traces)]
    cmd += ["--minutes", f"{minutes:g}", "--seed", str(seed)]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        why = f"train-predictor exited {done.returncode} (its stderr above)"
        return PredictorFit(False, why, failed=True)
    # The held-out figures as the predictor's own config records them (its stdout also
    # carries the engine's prints).
    from kernels.guidance.predictor import load_config

    record = load_config(out).training
    keep = ("val", "val_marginal_baseline", "traces_drawn", "traces_closed", "epochs_run")
    return PredictorFit(True, None, {k: record[k] for k in keep if k in record})


def record(out: Path, p: PredictorFit) -> None:
    """The outcome into ``profile.json`` and a line into ``report.md``."""
    doc_path = out / "profile.json"
    doc = json.loads(doc_path.read_text())
    doc["predictor"] = {"dir": "bg_predictor" if p.trained else None, "left_out": p.reason}
    if p.metrics:
        doc["predictor"]["metrics"] = p.metrics
    doc_path.write_text(json.dumps(doc, indent=1) + "\n")
    if p.trained:
        line = (
            "Budget predictor (`bg_predictor/`): trained on the model's traces of the fit "
            f"part; held-out figures: {json.dumps(p.metrics)}."
        )
    else:
        line = f"Budget predictor: left out ({p.reason})."
    with (out / "report.md").open("a") as f:
        f.write("\n" + line + "\n")
