"""``thinkgate fit`` as docs/fit.md writes it, on the testbed with its defaults (the
default model at its default context, a server the command starts and stops): a small
workload fitted in ``--minutes 2`` (with a small budget predictor trained on its fit
part), then judged once on a few test questions by a server
the command starts with ``--profile``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.defaults import CALIBRATION_QUESTIONS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.vllm
@pytest.mark.slow
def test_fit_then_judge_on_the_testbed(tmp_path: Path) -> None:
    workload = tmp_path / "small.jsonl"
    workload.write_text("\n".join(CALIBRATION_QUESTIONS.read_text().splitlines()[:24]) + "\n")
    out = tmp_path / "profile"
    env = {k: v for k, v in os.environ.items() if k != "THINKGATE_MAX_MODEL_LEN"}
    fit = [sys.executable, "-m", "server.cli", "fit", "--workload", str(workload)]
    fit += ["--out", str(out)]
    # A small predictor (the defaults train on 400 traces for 3 minutes): that the fit
    # trains one into the profile and the judgment's server guides with it.
    small = ["--predictor-traces", "48", "--predictor-minutes", "0.2"]
    done = subprocess.run(
        [*fit, "--minutes", "2", *small],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "profile.json").read_text())
    assert doc["model"] == "testbed-base" and doc["fit"]["took_s"] < 2 * 60 + 60
    fit_ids, test_ids = doc["split"]["fit_ids"], doc["split"]["test_ids"]
    assert len(fit_ids) + len(test_ids) == 24 and not set(fit_ids) & set(test_ids)
    table = json.loads((out / "auto-table.json").read_text())
    assert table["rows"] and all(
        r["questions"] == doc["fit"]["questions_per_row"] for r in table["rows"]
    )
    assert 1 <= doc["constants"]["answer_reserve"] < 64
    assert (out / "accuracy.png").stat().st_size > 0
    assert doc["predictor"]["dir"] == "bg_predictor", doc["predictor"]
    assert (out / "bg_predictor" / "predictor.safetensors").stat().st_size > 0
    prompts = (out / "predictor-prompts.jsonl").read_text().splitlines()
    assert len(prompts) == len(fit_ids)
    judged = subprocess.run(
        [*fit, "--judge", "--limit", "4", "--ceilings", "300"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert judged.returncode == 0, judged.stderr[-3000:]
    log = Path(re.findall(r"server log: (\S+)", judged.stderr)[0]).read_text()
    # The judgment's engine guides with the profile's predictor, not the model's own.
    homes = [json.loads(line)["home"] for line in log.splitlines() if '"engine.predictor"' in line]
    assert homes and Path(homes[0]).resolve() == out.resolve(), homes
    entry = json.loads((out / "judgments.json").read_text())[0]
    assert entry["questions"] == 4 and not entry["second_look"]
    assert any(c["plan"] == "auto" for c in entry["cells"])
    assert "## Judgment" in (out / "report.md").read_text()
