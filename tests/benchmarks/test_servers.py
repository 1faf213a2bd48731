"""A benchmark stopped by SIGTERM stops the servers it started (they run in sessions of
their own, so nothing else would)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.servers import ROOT

BENCH = """
import sys, time
from pathlib import Path
from benchmarks.servers import free_port, serve

port = free_port()
cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
with serve(cmd, ready_path="/", log=Path(sys.argv[1]), port=port, timeout_s=60) as url:
    print(url.pid, flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_ends_a_benchmark_through_its_cleanup(tmp_path: Path) -> None:
    bench = subprocess.Popen(
        [sys.executable, "-c", BENCH, str(tmp_path / "server.log")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert bench.stdout is not None
        server_pid = int(bench.stdout.readline())
        assert _alive(server_pid)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _alive(server_pid):  # reaped by the benchmark before it exited
            assert time.monotonic() < deadline, "the server outlived the benchmark"
            time.sleep(0.05)
    finally:
        bench.kill()
        bench.wait()
