"""The environment vLLM's engines need on a CPU host, where vLLM's own defaults do not fit
a gateway that starts several engines.

* ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache per engine): unset, vLLM gives each engine
  90% of the machine's memory, so the first engine takes it and the next one (the reward
  model, the PRM) fails to start. 1 GiB holds about 23,000 tokens of a 135M model.
* ``VLLM_CPU_OMP_THREADS_BIND``: vLLM's ``auto`` pins every engine to the same core; the
  engines of one gateway would share it. ``nobind`` leaves them to the scheduler.

``thinkgate serve`` and ``thinkgate replica`` (whose replica and PRM replica share a box
in the quick start, the suite and the benchmarks) apply these where the environment
does not say otherwise (what ``scripts/env.sh`` sets for the quick start and the suite
is the same).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Final

DEFAULTS: Final = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def apply(env: MutableMapping[str, str], *, on_cpu: bool) -> list[str]:
    """Set each default the environment lacks, on a CPU host; the assignments made."""
    if not on_cpu:
        return []
    made = []
    for key, value in DEFAULTS.items():
        if key not in env:
            env[key] = value
            made.append(f"{key}={value}")
    return made
