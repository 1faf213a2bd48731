"""A server for a calibration run (and the benchmarks, which build on this): started as
a subprocess on a free local port, ready when its ready path answers, stopped (its whole
process group) when the block ends; and ``machine()``, the line a measurement records of
where it was made.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
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
    with (
        unwinds_on_sigterm(),
        started(cmd, port=port, ready_path="/ready", log=log, timeout_s=timeout_s) as (url, _),
    ):
        yield url


def server_env(*, cpu_engine_in_core: bool = False) -> dict[str, str]:
    """The environment a server subprocess gets. ``cpu_engine_in_core``: a vLLM server
    gets the executor ``thinkgate serve`` and ``thinkgate replica`` use on CPU
    (engines/local/executor.py)."""
    env = dict(os.environ)
    on_cpu = executor.on_cpu()
    # Several engines may share the box: vLLM's CPU defaults would give the first one
    # the memory and pin them all to one core (engines/local/cpu_host.py), and each
    # engine's torch would run a thread per core (scripts/env.sh sets the same).
    if on_cpu:
        cpu_host.apply(env, on_cpu=on_cpu)
        env.setdefault("OMP_NUM_THREADS", "1")
    if cpu_engine_in_core:
        executor.replica_env(env, on_cpu=on_cpu)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


@contextmanager
def started(
    cmd: Sequence[str],
    *,
    port: int,
    ready_path: str,
    log: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[tuple[str, int]]:
    """Run ``cmd`` (a server on 127.0.0.1:``port``) until the block ends; yields its URL
    and process id once ``ready_path`` answers 200. Stopping it stops its whole session
    (the server and its engine processes)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=dict(env) if env is not None else server_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url + ready_path, log=log, timeout_s=timeout_s)
        yield url, proc.pid
    finally:
        for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


def _wait_ready(proc: subprocess.Popen[bytes], ready: str, *, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(ready, timeout=2).status_code == 200:
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
def unwinds_on_sigterm() -> Iterator[None]:
    """SIGTERM (a supervisor, ``timeout``, ``kill``) ends the run through its ``finally``
    blocks, which stop the servers it started: by default it would die at once and leave
    them running in their own sessions. Only the main thread can set a handler, and one
    set by the caller is left alone."""
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
