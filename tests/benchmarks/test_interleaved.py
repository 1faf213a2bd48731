"""bench interleaved's paired statistics and report (the servers it drives are the
ones bench overhead starts; its runs are benchmarks, not tests)."""

from __future__ import annotations

import pytest

from benchmarks.interleaved import paired, quartiles, report


def runs(values: list[float]) -> list[dict[str, float]]:
    return [{"p99_itl_ms": v} for v in values]


def test_paired_ratios_are_b_over_a_per_pair() -> None:
    got = paired(runs([10, 10, 20, 10]), runs([12, 9, 20, 15]), "p99_itl_ms")
    # ratios 1.2, 0.9, 1.0, 1.5 -> sorted 0.9, 1.0, 1.2, 1.5
    assert got["median"] == pytest.approx(1.1)
    assert (got["min"], got["max"]) == (pytest.approx(0.9), pytest.approx(1.5))
    assert got["b_higher"] == 2  # 12 > 10 and 15 > 10; a tie is not higher
    assert got["pairs"] == 4
    assert got["q1"] <= got["median"] <= got["q3"]


def test_pairs_with_a_zero_baseline_are_left_out() -> None:
    got = paired(runs([0, 10]), runs([5, 11]), "p99_itl_ms")
    assert got["pairs"] == 1
    assert got["median"] == pytest.approx(1.1)
    assert paired(runs([0]), runs([3]), "p99_itl_ms") == {}


def test_quartiles_of_one_value() -> None:
    assert quartiles([1.3]) == (1.3, 1.3)


def test_report_says_when_it_is_an_a_a_run() -> None:
    metrics = {
        "request_throughput": 10.0,
        "output_throughput": 640.0,
        "median_ttft_ms": 15.0,
        "p99_ttft_ms": 30.0,
        "median_tpot_ms": 4.0,
        "p99_tpot_ms": 6.0,
        "median_itl_ms": 4.0,
        "p99_itl_ms": 12.0,
        "itl_over_15ms_pct": 0.5,
    }
    slower = {k: v * 1.25 for k, v in metrics.items()}
    result = {
        "a": "bare",
        "b": "bare",
        "runs": {"a": [metrics, metrics], "b": [slower, metrics]},
        "seconds": 60.0,
        "machine": "test box",
        "binding": "VLLM_CPU_OMP_THREADS_BIND=nobind",
        "git": "abc1234",
        "args": {"rate": 15.0, "input_len": 32, "output_len": 64, "prompts": 150, "pairs": 2},
    }
    text = report(result, "thinkgate bench interleaved --a bare --b bare")
    assert "A/A" in text and "noise floor" in text
    row = next(line for line in text.splitlines() if line.startswith("| p99_itl_ms |"))
    # ratios 1.25 and 1.0: median 1.125, one pair of two higher
    assert "| 1.125 |" in row and "| 1/2 |" in row
    assert "rate 15" in text
    assert "test box at commit abc1234, VLLM_CPU_OMP_THREADS_BIND=nobind;" in text
