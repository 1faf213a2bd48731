"""Where the local engines run their model (engines/local/executor.py): the choice each
setting makes, and the switch a replica's vLLM server gets."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from engines.local import cpu_host, executor
from engines.settings import ExecutorChoice
from server.settings import Settings


@pytest.mark.parametrize(
    ("choice", "on_cpu", "world_size", "expected"),
    [
        ("auto", True, 1, True),  # the CPU default: no worker process, no ring
        ("auto", False, 1, False),  # a GPU: vLLM's own choice (already in the core there)
        ("auto", True, 2, False),  # several workers need their processes
        ("uni", False, 1, True),
        ("mp", True, 1, False),
    ],
)
def test_in_core_follows_the_choice_and_the_host(
    choice: ExecutorChoice, on_cpu: bool, world_size: int, expected: bool
) -> None:
    assert executor.in_core(choice, on_cpu=on_cpu, world_size=world_size) is expected


def test_the_backend_is_the_class_the_cpu_platform_keeps() -> None:
    """vLLM's CPU platform rewrites the string "uni" to "mp"; a class it leaves alone."""
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    assert executor.backend("auto", on_cpu=True, world_size=1) is UniProcExecutor
    assert executor.backend("mp", on_cpu=True, world_size=1) == "mp"
    assert executor.backend("auto", on_cpu=False, world_size=1) is None


def test_replica_env_sets_the_switch_on_cpu_only_and_keeps_the_operators() -> None:
    env: dict[str, str] = {}
    assert executor.replica_env(env, on_cpu=True) == ["VLLM_ENABLE_V1_MULTIPROCESSING=0"]
    assert env == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    mine = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    assert executor.replica_env(mine, on_cpu=True) == []
    assert mine == {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    gpu: dict[str, str] = {}
    assert executor.replica_env(gpu, on_cpu=False) == [] and gpu == {}


def test_settings_refuse_one_worker_for_tensor_parallelism() -> None:
    with pytest.raises(ValidationError, match="executor 'uni' runs one worker"):
        Settings(executor="uni", tensor_parallel_size=2)
    assert Settings(executor="mp", tensor_parallel_size=2).local.executor == "mp"
    assert Settings().local.executor == "auto"


def test_cpu_host_defaults_fill_only_what_the_environment_lacks() -> None:
    env = {"VLLM_CPU_KVCACHE_SPACE": "4"}
    assert cpu_host.apply(env, on_cpu=True) == ["VLLM_CPU_OMP_THREADS_BIND=nobind"]
    assert env == {"VLLM_CPU_KVCACHE_SPACE": "4", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    gpu: dict[str, str] = {}
    assert cpu_host.apply(gpu, on_cpu=False) == [] and gpu == {}


def test_several_engines_in_one_process_share_the_cores_as_torch_threads() -> None:
    cores = len(os.sched_getaffinity(0))
    env: dict[str, str] = {}
    assert (
        cpu_host.apply(env, on_cpu=True, engines=3)[-1] == f"OMP_NUM_THREADS={max(1, cores // 3)}"
    )
    one: dict[str, str] = {}
    cpu_host.apply(one, on_cpu=True)  # one engine: torch's own default
    assert "OMP_NUM_THREADS" not in one
    mine = {"OMP_NUM_THREADS": "7"}
    cpu_host.apply(mine, on_cpu=True, engines=3)
    assert mine["OMP_NUM_THREADS"] == "7"


@pytest.mark.parametrize(
    ("flags", "engines"),
    [
        ({}, 3),  # the testbed default: generator, reward model, PRM
        ({"prm_model": "none"}, 2),
        ({"reward_url": "http://r:1"}, 2),
        ({"model": "/models/other"}, 1),  # the testbed's scorers stay out
        ({"model": "/models/other", "prm_model": "/models/prm"}, 2),
        ({"engine": "remote", "vllm_urls": ("http://g:1",)}, 0),
    ],
)
def test_serve_counts_the_engines_it_starts_in_process(
    flags: dict[str, object], engines: int
) -> None:
    from server.cli import in_process_engines

    assert in_process_engines(Settings(**flags)) == engines  # type: ignore[arg-type]
