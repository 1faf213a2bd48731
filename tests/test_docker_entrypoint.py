"""The image's entrypoint serves either role (no Docker engine here: the script itself
runs, with a stand-in ``thinkgate`` on PATH that prints its arguments)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "docker-entrypoint.sh"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "serve"),
        (["--model", "m"], "serve --model m"),
        (["serve", "--engine", "remote"], "serve --engine remote"),
        (["replica", "--model", "m"], "replica --host 0.0.0.0 --port 8000 --model m"),
        (["bench", "remote"], "bench remote"),
    ],
)
def test_entrypoint_dispatches_by_role(tmp_path: Path, args: list[str], expected: str) -> None:
    fake = tmp_path / "thinkgate"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == expected


def test_the_gpu_image_takes_its_dependencies_from_pyproject() -> None:
    """One list: the GPU image installs pyproject.toml's dependencies (vLLM, already in
    its base image, is an extra and is not re-resolved), never a hand-kept copy."""
    text = (SCRIPT.parent.parent / "Dockerfile").read_text()
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert installs, "the Dockerfile installs nothing"
    ours = [line for line in installs if '"$VLLM_SPEC"' not in line]
    assert len(ours) == 1 and len(installs) == 2, installs
    for line in ours:
        assert line.rstrip().endswith("-e ."), line
        assert "--no-deps" not in line, line


def test_the_gpu_image_base_and_its_vllm_are_the_gpu_extras_pin() -> None:
    """vLLM's image of the pinned release by default; scripts/image-gpu.sh installs the
    same pin (read from pyproject.toml) where that image cannot be pulled."""
    import tomllib

    root = SCRIPT.parent.parent
    (pin,) = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["gpu"]
    version = pin.removeprefix("vllm==")
    assert f"ARG BASE=vllm/vllm-openai:v{version}" in (root / "Dockerfile").read_text()
    script = (root / "scripts" / "image-gpu.sh").read_text()
    assert '["gpu"][0]' in script and "vllm/vllm-openai:v$version" in script


def test_the_cpu_image_base_is_a_build_argument() -> None:
    text = (SCRIPT.parent.parent / "Dockerfile.cpu").read_text()
    assert "ARG BASE=python:3.11-slim" in text and "FROM ${BASE}" in text
