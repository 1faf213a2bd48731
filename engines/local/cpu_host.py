"""The environment vLLM's engines need on a CPU host, where vLLM's own defaults do not fit
a gateway that starts several engines.

* ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache per engine): unset, vLLM gives each engine
  90% of the machine's memory, so the first engine takes it and the next one (the reward
  model, the PRM) fails to start. 1 GiB holds about 23,000 tokens of a 135M model.
* ``VLLM_CPU_OMP_THREADS_BIND``: vLLM's ``auto`` pins every engine to the same core; the
  engines of one gateway would share it. ``nobind`` leaves them to the scheduler.
* ``OMP_NUM_THREADS``, where one process starts several engines: their share of the
  cores each (unbound, torch runs a thread per core in every engine).

``thinkgate serve`` and ``thinkgate replica`` (whose replica and PRM replica share a box
in the quick start, the suite and the benchmarks) apply these where the environment
does not say otherwise (what ``scripts/env.sh`` sets for the quick start and the suite
is the same).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Final

DEFAULTS: Final = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


THREADS: Final = "OMP_NUM_THREADS"


def apply(env: MutableMapping[str, str], *, on_cpu: bool, engines: int = 1) -> list[str]:
    """Set each default the environment lacks, on a CPU host; the assignments made.
    ``engines``: how many vLLM engines this process starts; with several, each gets its
    share of the cores as torch threads (``OMP_NUM_THREADS``): unbound, every engine's
    torch would run a thread per core, and on 2 cores three engines' threads spinning
    against each other answered 3-5x fewer step-search questions per second
    (benchmarks/results/search_peers/joint.md)."""
    if not on_cpu:
        return []
    made = []
    wanted = dict(DEFAULTS)
    if engines > 1:
        wanted[THREADS] = str(max(1, len(os.sched_getaffinity(0)) // engines))
    for key, value in wanted.items():
        if key not in env:
            env[key] = value
            made.append(f"{key}={value}")
    return made
