"""Every example request of the README runs, as printed, against the live server: the
curl lines through bash, the Python block through the real SDKs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
FAMILY = README.split("## A request in each family", 1)[1].split("\n## ", 1)[0]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", FAMILY, flags=re.S)


def _here(text: str, base_url: str) -> str:
    return text.replace("http://127.0.0.1:8000", base_url).replace("localhost:8000", base_url)


def test_the_curl_examples(base_url: str, served_model: str) -> None:
    blocks = _blocks("bash")
    assert len(blocks) == 4, "budgets, a thinking budget, sampling, search"
    for block in blocks:
        script = _here(block, base_url).replace('"testbed-base"', f'"{served_model}"')
        out = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, timeout=240, check=False
        )
        assert out.returncode == 0, (block, out.stderr)
        reply = json.loads(out.stdout)
        assert "error" not in reply, (block, reply)
        assert reply["choices"][0]["message"]["content"], (block, reply)
        assert reply["thinkgate"]["strategy"], reply


def test_the_python_example(base_url: str, served_model: str) -> None:
    (block,) = _blocks("python")
    script = _here(block, base_url).replace('"testbed-base"', f'"{served_model}"')
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, check=False
    )
    assert out.returncode == 0, out.stderr
    answers = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(answers) == 2, out.stdout  # the Responses answer, then the Messages one
