"""``thinkgate calibrate pets`` from a pool cache: fit, solve, write a loadable table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from server.cli import main as thinkgate
from strategies.pets.calibration.cli import main
from strategies.pets.labels import K0, PATTERNS
from strategies.pets.table import DEFAULT_TABLE, PetsTable


def write_pools(path: Path, n: int = 12, pool: int = 32) -> None:
    rng = np.random.default_rng(0)
    with path.open("w") as f:
        for q in range(n):
            p = rng.dirichlet(np.full(4, 0.5 + q % 3))
            answers = [str(x) for x in rng.choice(4, size=pool, p=p)]
            answers[0] = None  # type: ignore[call-overload]
            doc = {
                "messages": [{"role": "user", "content": f"q{q}"}],
                "gold": answers[1],
                "answers": answers,
                "completion_tokens": [10] * pool,
            }
            f.write(json.dumps(doc) + "\n")


@pytest.mark.parametrize("avg", [4, 10, 64])
def test_calibrate_writes_a_table_that_honours_the_average(tmp_path: Path, avg: float) -> None:
    pools, out = tmp_path / "pools.jsonl", tmp_path / "table.json"
    write_pools(pools)
    args = ["pets", "--pools", str(pools), "--average-budget", str(avg), "--out", str(out)]
    assert main([*args, "--trials", "500"]) == 0
    table = PetsTable.load(out)
    assert [b.pattern for b in table.buckets] == list(PATTERNS)
    assert table.expected_budget <= max(avg, K0) + 1e-9
    assert all(K0 <= b.budget <= 64 for b in table.buckets)
    if avg <= K0:
        assert {b.budget for b in table.buckets} == {K0}
    if avg >= 64:
        assert all(b.budget == 64 for b in table.buckets if b.a > 0)


def test_thinkgate_cli_dispatches_and_needs_questions_without_cache(tmp_path: Path) -> None:
    assert (
        thinkgate(
            ["calibrate", "pets", "--average-budget", "8", "--pools", str(tmp_path / "none.jsonl")]
        )
        == 2
    )


def test_shipped_testbed_table_is_valid_and_spends_where_warmups_disagree() -> None:
    table = PetsTable.load(DEFAULT_TABLE)
    assert table.expected_budget <= table.average_budget + 1e-9
    assert table.calibration["questions"]
    # Unanimous warm-ups are the settled questions: they never get more than split ones.
    assert table.budget("4") <= min(b.budget for b in table.buckets[1:])
