"""bench processors-idle's drive and report pieces (its engine runs are a benchmark)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from benchmarks.overhead_engine import random_prompts, run_rate, timed
from benchmarks.processors_idle import SHOWN, report
from benchmarks.servers import worker_binding


async def _deltas(counts: list[int], gap_s: float = 0.0) -> AsyncIterator[int]:
    for n in counts:
        await asyncio.sleep(gap_s)
        yield n


def test_timed_counts_tokens_and_one_gap_per_later_nonempty_delta() -> None:
    got = asyncio.run(timed(_deltas([1, 0, 2, 1])))
    assert got["tokens"] == 4
    assert len(got["itl"]) == 2  # deltas of 1, 2 and 1 tokens; the empty one is no token
    assert got["ttft"] <= got["e2e"]


def test_run_rate_drives_every_prompt_and_names_bench_serves_metrics() -> None:
    seen: list[list[int]] = []

    async def one(prompt: list[int]) -> dict[str, object]:
        seen.append(prompt)
        return await timed(_deltas([1, 1, 1], gap_s=0.001))

    prompts = random_prompts(72, 5, 8)
    got = asyncio.run(run_rate(one, prompts, float("inf")))
    assert sorted(seen) == sorted(prompts)
    assert got["request_throughput"] > 0
    assert got["output_throughput"] == pytest.approx(3 * got["request_throughput"])
    assert got["median_itl_ms"] >= 1.0  # each of 2 gaps spans at least one 1 ms sleep


def test_random_prompts_skip_the_special_ids_and_repeat() -> None:
    a = random_prompts(72, 3, 10)
    assert a == random_prompts(72, 3, 10)
    assert all(16 <= t < 72 for p in a for t in p) and [len(p) for p in a] == [10, 10, 10]


def test_worker_binding_names_what_was_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert worker_binding() == "vLLM's default worker binding"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert worker_binding() == "VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1"


def test_report_gives_the_paired_ratio_of_default_over_none() -> None:
    base = dict.fromkeys(SHOWN, 5.0) | {"p99_itl_ms": 10.0}
    result = {
        "a": [],
        "b": ["confidence", "elastic", "guidance"],
        "runs": {"a": [base, base], "b": [{k: v * 1.1 for k, v in base.items()}, base]},
        "seconds": 30.0,
        "machine": "test box",
        "binding": "vLLM's default worker binding",
        "git": "abc1234",
        "args": {"rate": 30.0, "input_len": 32, "output_len": 64, "prompts": 150, "pairs": 2},
    }
    text = report(result, "thinkgate bench processors-idle")
    assert "B: confidence, elastic, guidance" in text and "rate 30" in text
    row = next(line for line in text.splitlines() if line.startswith("| p99_itl_ms |"))
    assert "| 1.050 |" in row and "| 1/2 |" in row  # ratios 1.1 and 1.0
