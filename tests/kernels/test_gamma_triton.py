"""The budget-guidance Triton kernel vs the torch op under TRITON_INTERPRET=1.

In a child process: the variable must be set before triton is imported and must not
leak into the vLLM engines other tests start. Not compiled on a GPU here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gamma_triton_matches_torch_under_interpreter() -> None:
    seed = 0  # one child process (each pays the torch + triton import); 8 random cases
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    script = Path(__file__).with_name("gamma_interpret_check.py")
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", str(script), str(seed), "8"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok 8"
