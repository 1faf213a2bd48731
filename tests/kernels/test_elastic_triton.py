"""Triton kernels vs torch ops under TRITON_INTERPRET=1, in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a Triton-interpreter subprocess per seed: ~3 s each
@pytest.mark.parametrize("seed", [0, 1])
def test_triton_matches_torch_under_interpreter(seed: int) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    script = Path(__file__).with_name("triton_interpret_check.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(seed), "30"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok 30"


@pytest.mark.slow  # compiles the kernels for sm90 in a subprocess: ~3 s
def test_kernels_compile_for_sm90_without_a_gpu() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    script = Path(__file__).with_name("triton_compile_check.py")
    proc = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().splitlines()[-1] == "ok 3"
