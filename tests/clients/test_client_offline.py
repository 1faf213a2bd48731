"""The client examples, run before any server answers, say so in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLIENTS = Path(__file__).resolve().parents[2] / "clients"


def test_the_examples_say_one_line_when_no_server_answers() -> None:
    """A client started before the server is ready gets a one-line hint, not a traceback."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for cmd in (
        [
            sys.executable,
            str(CLIENTS / "python_example.py"),
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
        ],
        ["bash", str(CLIENTS / "curl_example.sh"), f"http://127.0.0.1:{port}"],
    ):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stderr
        assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "bash scripts/serve.sh" in out.stderr
