"""Codex CLI, unmodified (``@openai/codex``, pinned in clients/js), completes a turn on the
default server: ``thinkgate serve`` with no flag but its port (the 65,536-token context
Codex's first request needs), a custom provider on the Responses API, ``codex exec``.
Its request carries what Codex sends (``client_metadata``, tools, a long instructions
prompt); the testbed's answer to it is not meant to be good, the protocol is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.calibrate.local_server import free_port, started

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "clients" / "js"
CODEX = JS / "node_modules" / ".bin" / "codex"
NODE = JS / "node_modules" / ".bin" / "node"


@pytest.fixture
def default_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]
    # The suite's own short context (THINKGATE_MAX_MODEL_LEN) left out: the default.
    env = {
        **{k: v for k, v in os.environ.items() if k != "THINKGATE_MAX_MODEL_LEN"},
        "THINKGATE_STATE_DIR": str(tmp_path / "state"),
    }
    log = tmp_path / "serve.log"
    with started(
        cmd, port=port, ready_path="/ready", log=log, timeout_s=600, env=env, cwd=ROOT
    ) as (url, _):
        yield url


@pytest.mark.vllm
@pytest.mark.slow
def test_codex_completes_a_turn_on_the_default_server(default_server: str, tmp_path: Path) -> None:
    if not CODEX.exists():
        assert shutil.which("npm") is None, "scripts/setup.sh installs clients/js (npm ci)"
        pytest.skip("no npm here: clients/js is not installed")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "testbed-base"\nmodel_provider = "thinkgate"\n\n'
        "[model_providers.thinkgate]\n"
        'name = "thinkgate"\n'
        f'base_url = "{default_server}/v1"\n'
        'wire_api = "responses"\n'
    )
    work = tmp_path / "work"
    work.mkdir()
    path = os.pathsep.join([str(NODE.parent), os.environ.get("PATH", "")])
    done = subprocess.run(
        [str(CODEX), "exec", "--skip-git-repo-check", "Compute 3+4 mod 10."],
        cwd=work,
        env={**os.environ, "CODEX_HOME": str(home), "OPENAI_API_KEY": "unused", "PATH": path},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "tokens used" in out and "provider: thinkgate" in out, out[-3000:]
    assert "ERROR:" not in out, out[-3000:]
