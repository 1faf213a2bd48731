"""Where a vLLM engine runs its model: in the engine core process, or in a worker of its own.

Why: vLLM's CPU platform always gives a one-worker engine a separate worker process
(``MultiprocExecutor``), and every engine step crosses a shared-memory ring twice (core to
worker, worker back). On a 2-core host that hand-over is most of a small model's step: the
reader spins for a core (``engines/local/engine_wait.py``) or sleeps and waits for a
wake-up. With the worker inside the engine core (``UniProcExecutor``, what vLLM itself
uses for one GPU) a step is a function call. Measured on 2 cores with the testbed
(``thinkgate bench executor``, benchmarks/results/executor/executor.md, two alternating pairs):
a lone 64-token answer in 0.80x the time, DeepConf@16 from 4 clients 1.38x the questions
per second, particle filtering 1.25x, the engine processes' CPU 0.90x.

vLLM's CPU platform turns the string ``"uni"`` back into ``"mp"`` unless
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (its comment: OpenMP's environment cannot be set in
the core's process; with one thread per engine, what ``scripts/env.sh`` sets, nothing is
lost). The in-process engines pass the executor class instead, which the platform leaves
alone and which changes nothing else in the gateway; vLLM's own server (``thinkgate
replica``) gets the environment variable, the only handle its command line offers, in
its own process.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Final

from engines.settings import ExecutorChoice

if TYPE_CHECKING:
    from vllm.v1.executor.abstract import Executor

MULTIPROCESSING_ENV: Final = "VLLM_ENABLE_V1_MULTIPROCESSING"


def on_cpu() -> bool:
    """Whether vLLM runs on this host's CPU (its platform, detected once by vLLM)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def in_core(choice: ExecutorChoice, *, on_cpu: bool, world_size: int) -> bool:
    """Whether the engine's worker runs inside its engine core process."""
    if choice == "uni":
        return True
    return choice == "auto" and on_cpu and world_size == 1


def backend(
    choice: ExecutorChoice, *, on_cpu: bool, world_size: int
) -> type[Executor] | str | None:
    """``distributed_executor_backend`` for an in-process engine's ``AsyncEngineArgs``
    (None: vLLM decides)."""
    if in_core(choice, on_cpu=on_cpu, world_size=world_size):
        from vllm.v1.executor.uniproc_executor import UniProcExecutor

        chosen: type[Executor] = UniProcExecutor
        return chosen
    return "mp" if choice == "mp" else None


def replica_env(env: MutableMapping[str, str], *, on_cpu: bool) -> list[str]:
    """Put the worker of vLLM's own CPU server in its engine core, unless the environment
    already says otherwise; the assignments made, to show with the command."""
    if not on_cpu or MULTIPROCESSING_ENV in env:
        return []
    env[MULTIPROCESSING_ENV] = "0"
    return [f"{MULTIPROCESSING_ENV}=0"]
