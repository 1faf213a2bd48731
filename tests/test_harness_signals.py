"""The suite's own harness: a session stopped by SIGTERM or SIGHUP still tears down its
fixtures (so the servers it started do not outlive it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The probe session as a terminal would start it: a run under nohup (SIGHUP ignored,
# which the harness then leaves ignored) passes its dispositions on to children.
PROBE = """
import signal, sys
import pytest
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, signal.SIG_DFL)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/sigterm_probe.py"]))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped: its parent is gone) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signalled_session_tears_its_fixtures_down(tmp_path: Path, sig: signal.Signals) -> None:
    env = {**os.environ, "PROBE_DIR": str(tmp_path)}
    env.pop("PYTEST_ADDOPTS", None)
    session = subprocess.Popen(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    pid_file = tmp_path / "child.pid"
    deadline = time.monotonic() + 120
    while not pid_file.exists():
        assert session.poll() is None, session.stdout.read().decode() if session.stdout else ""
        assert time.monotonic() < deadline, "the probe session never started its test"
        time.sleep(0.1)
    child = int(pid_file.read_text())
    assert _alive(child)
    session.send_signal(sig)
    try:
        out, _ = session.communicate(timeout=60)
        left = _alive(child)
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
            session.wait()
        if _alive(child):  # the probe left it: this test's own clean-up
            os.killpg(child, signal.SIGKILL)
    text = out.decode()
    assert session.returncode == 2, text  # pytest's "interrupted"
    assert (tmp_path / "torn-down").read_text() == "yes", text
    assert not left, text
    assert f"stopped by {sig.name}" in text, text
