"""vLLM general plugin: how long vLLM's engine processes spin while they wait for each other.

Entry point (pyproject): ``[project.entry-points."vllm.general_plugins"]
thinkgate_engine_wait = "engines.local.engine_wait:register"``. vLLM calls it in every process
it starts; it changes nothing unless :data:`ENV` is set in their environment.

Why: vLLM's engine core and its worker process hand every step over a shared-memory ring
(``shm_broadcast.MessageQueue``). A reader spins (``sched_yield``) for 1 s after its last
read before it sleeps on a ZMQ notification, and while asleep rechecks the ring every 5 s.
On a GPU host the spin takes an otherwise idle core and saves microseconds a step. On a
CPU host the engine core's spin takes a whole core from the worker doing the step, the
gateway and the clients. Measured on 2 cores (testbed, 8 concurrent 64-token requests
through the gateway; ``python -m benchmarks.engine_wait``): the engine core used 85-90%
of a core and the p99 latency was 2.5-5.9 s; with a 1 ms spin, 0.8 s (ratio 0.32) and the
batch took 0.65x the time, while a request alone took 1.6x longer at p50 (it waits for a
wake-up at every step instead of spinning through it): that is the default's cost. A
short spin exposes a lost wake-up (the notification socket keeps one message and drops
the others: measured, a 5.6 s stall whenever it hit), so the recheck interval becomes
:data:`RECHECK_MS` whenever the spin is shortened. Lost wake-ups are frequent under load
(a step outlasts the 1 ms spin, the reader sleeps, the worker's notification is
dropped): at a 20 ms recheck they were the ~24 ms inter-token gaps behind every server's
p99 ITL here; at 2 ms they cost 2 ms (``thinkgate bench stream-gaps``:
benchmarks/results/stream_gaps/stream-gaps.md: p99 gap 25.1 -> 7.9 ms), for 1-2% of a core more
while idle (a sleeping reader polls every 2 ms: the engine processes of an idle server
used 0.027-0.042 cores instead of 0.018, same benchmark).
"""

from __future__ import annotations

import logging
import os
from typing import Final

ENV: Final = "THINKGATE_ENGINE_SPIN_MS"
"""Milliseconds a waiting vLLM engine process spins before it sleeps; unset: vLLM's own (1000)."""
RECHECK_MS: Final = 2
"""How often a sleeping reader rechecks the ring (vLLM: 5000), so a lost wake-up costs this."""
RECHECK_ENV: Final = "THINKGATE_ENGINE_RECHECK_MS"
"""Overrides :data:`RECHECK_MS` (whole milliseconds >= 1); read only with a short spin."""
CPU_DEFAULT_MS: Final = 1.0
"""The spin thinkgate asks for on a CPU host unless told otherwise."""

log = logging.getLogger(__name__)


def register() -> None:
    """Apply :data:`ENV` in this process, if set. Never raises: a bad value or a vLLM whose
    ring changed shape leaves vLLM's own behaviour and says so in the log."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return
    try:
        spin_ms = float(raw)
        if not spin_ms >= 0:
            raise ValueError(raw)
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds >= 0; vLLM's spin is kept", ENV, raw)
        return
    recheck_ms = RECHECK_MS
    raw = os.environ.get(RECHECK_ENV, "").strip()
    if raw:
        if raw.isdigit() and int(raw) >= 1:
            recheck_ms = int(raw)
        else:
            log.warning(
                "%s=%r is not whole milliseconds >= 1; %d is kept", RECHECK_ENV, raw, recheck_ms
            )
    apply(spin_ms / 1000.0, recheck_ms)


def apply(spin_s: float, recheck_ms: int = RECHECK_MS) -> bool:
    """Set the spin of every ``SpinCondition`` this process creates from now on, and the
    recheck of a sleeping reader when the spin is short; True if done."""
    try:
        from vllm.distributed.device_communicators import shm_broadcast as shm
    except ImportError:  # a vLLM without the ring: nothing spins there
        return False
    init = shm.SpinCondition.__init__
    names = init.__code__.co_varnames[: init.__code__.co_argcount]
    if names[-1:] != ("busy_loop_s",) or not init.__defaults__ or len(init.__defaults__) != 1:
        log.warning("vLLM's SpinCondition changed shape (%s); %s is ignored", names, ENV)
        return False
    init.__defaults__ = (spin_s,)
    if spin_s < 1.0:
        shm.SHM_READER_RECHECK_INTERVAL_MS = min(shm.SHM_READER_RECHECK_INTERVAL_MS, recheck_ms)
    return True


def export(spin_ms: float | None) -> None:
    """Put the spin in this process's environment before it starts vLLM's engine processes
    (they read it at start-up). ``None``: :data:`CPU_DEFAULT_MS` on a CPU host, else vLLM's
    own. The same variable is the server's setting, so a value set there arrives here."""
    if spin_ms is None:
        from engines.local.executor import on_cpu

        if not on_cpu():
            return
        spin_ms = CPU_DEFAULT_MS
    os.environ[ENV] = f"{spin_ms:g}"
