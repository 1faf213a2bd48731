"""The live server's vLLM engine processes wait without spinning a core (CPU host).

vLLM's worker spins for 1 s after each step it reads (``engines/local/engine_wait.py``); on the
2-core box that was a core taken from the next step, the gateway and the clients. The
server starts its engines with a 1 ms spin on CPU.
"""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest

pytestmark = pytest.mark.vllm


def _engine_processes(server: Any) -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process(server.process.pid).children(recursive=True)
        if p.name().startswith("VLLM::") or "EngineCore" in " ".join(p.cmdline())
    ]


def test_engine_processes_rest_once_the_work_is_done(live_server: Any, openai_client: Any) -> None:
    """After an answer, the engine processes use next to no CPU (vLLM's own 1 s spin
    costs the worker most of a core for a second after every step it reads)."""
    # (their /proc environ is overwritten by their process titles: behaviour is checked)
    procs = _engine_processes(live_server)
    assert procs, "no vLLM engine process found under the server"
    openai_client.chat.completions.create(
        model=live_server.model,
        messages=[{"role": "user", "content": "Compute 3+4*2 mod 10."}],
        max_tokens=8,
    )
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
    time.sleep(0.8)
    used = sum(sum(p.cpu_times()[:2]) - before[p.pid] for p in procs)
    assert used < 0.25, f"engine processes used {used:.2f} s of CPU in 0.8 s of idleness"


def test_the_models_run_inside_their_engine_cores(live_server: Any) -> None:
    """On CPU each engine's model runs in its engine core process (engines/local/executor.py):
    the generator, the reward model and the PRM each have a core and no worker process,
    so no step crosses a shared-memory ring."""
    titles = [
        " ".join(p.cmdline())
        for p in psutil.Process(live_server.process.pid).children(recursive=True)
    ]
    cores = [t for t in titles if t.startswith("VLLM::EngineCore")]
    workers = [t for t in titles if "Worker" in t]
    assert len(cores) == 3, titles
    assert not workers, titles
