"""lm-evaluation-harness, unmodified (``lm_eval --model local-completions``), on the
log-likelihood task the repository ships (``evals/lm_eval``): the same accuracy, and
the same per-document log-likelihoods, through thinkgate as through vLLM's own server
on the same model (a replica of the remote stack)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from testbed import model_path

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local")]

ROOT = Path(__file__).resolve().parents[2]
TASK = "testbed_running_value"


def _lm_eval(base_url: str, model: str, out: Path) -> dict[str, Any]:
    """Run lm-eval against ``base_url``; its results and per-sample log file."""
    args = ",".join(
        [
            f"base_url={base_url}/v1/completions",
            f"model={model}",
            f"tokenizer={model_path('base')}",
            "tokenizer_backend=huggingface",
            "max_retries=1",
        ]
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "local-completions",
            "--model_args",
            args,
            "--include_path",
            "evals/lm_eval",
            "--tasks",
            TASK,
            "--batch_size",
            "16",
            "--output_path",
            str(out),
            "--log_samples",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = next(out.rglob("results_*.json"))
    samples = next(out.rglob(f"samples_{TASK}_*.jsonl"))
    return {
        "acc": json.loads(results.read_text())["results"][TASK]["acc,none"],
        "samples": [json.loads(line) for line in samples.read_text().splitlines()],
    }


def test_lm_eval_log_likelihood_through_thinkgate_equals_vllms_own_server(
    live_server: Any, remote_stack: Any, tmp_path: Path
) -> None:
    replica = remote_stack.replicas[0].url
    upstream = httpx.get(f"{replica}/v1/models", timeout=10).json()["data"][0]["id"]
    # Both runs at once: each is mostly lm-eval's own start-up on one core.
    with ThreadPoolExecutor(2) as pool:
        ours_f = pool.submit(
            _lm_eval, live_server.base_url, live_server.model, tmp_path / "thinkgate"
        )
        theirs_f = pool.submit(_lm_eval, replica, upstream, tmp_path / "vllm")
        ours, theirs = ours_f.result(), theirs_f.result()
    assert ours["acc"] == theirs["acc"]
    assert ours["acc"] >= 0.5  # the model knows its running values: not noise
    by_doc = {s["doc_id"]: s for s in theirs["samples"]}
    assert len(ours["samples"]) == len(by_doc) == 40
    for s in ours["samples"]:
        mine = [r[0][0] for r in s["resps"]]
        other = [r[0][0] for r in by_doc[s["doc_id"]]["resps"]]
        assert mine == pytest.approx(other, abs=1e-3)
