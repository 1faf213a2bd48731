"""A thinkgate server for a calibration run: started as a subprocess on a free local
port, ready when ``/ready`` answers, stopped (its whole process group) when the block
ends; and ``machine()``, the line a calibration records of where it was measured.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from engines.local import cpu_host, executor


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def machine() -> str:
    """One line describing where a figure was measured."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


@contextmanager
def thinkgate(model: Path | str, *args: str, log: Path, timeout_s: float = 900.0) -> Iterator[str]:
    """``thinkgate serve --model model *args`` on a free port until the block ends;
    yields its URL. Its output goes to ``log``."""
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "serve", "--model", str(model)]
    cmd += ["--port", str(port), *args]
    with _unwinds_on_sigterm(), _started(cmd, port=port, log=log, timeout_s=timeout_s) as url:
        yield url


def _server_env() -> dict[str, str]:
    env = dict(os.environ)
    on_cpu = executor.on_cpu()
    # On CPU, vLLM's defaults would pin the engine to one core and torch would run a
    # thread per core (engines/local/cpu_host.py; scripts/env.sh sets the same).
    if on_cpu:
        cpu_host.apply(env, on_cpu=on_cpu)
        env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


@contextmanager
def _started(cmd: list[str], *, port: int, log: Path, timeout_s: float) -> Iterator[str]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        # A session of its own, so that stopping it stops its engine processes too.
        proc = subprocess.Popen(
            cmd, env=_server_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url, log=log, timeout_s=timeout_s)
        yield url
    finally:
        for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


def _wait_ready(proc: subprocess.Popen[bytes], url: str, *, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"server not ready after {timeout_s} s; see {log}")
        time.sleep(0.5)


def _stop_on_sigterm(signum: int, frame: object) -> None:
    # Once: a second SIGTERM must not cut short the server's own shutdown.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


@contextmanager
def _unwinds_on_sigterm() -> Iterator[None]:
    """SIGTERM (a supervisor, ``timeout``, ``kill``) ends the run through its ``finally``
    blocks, which stop the server: by default it would die at once and leave the server
    running in its own session. Only the main thread can set a handler, and one set by
    the caller is left alone."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
