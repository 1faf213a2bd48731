"""The search-peers bench's account of where a thinkgate question's time went."""

from __future__ import annotations

import math
from typing import Any

from benchmarks.search_peers import GEN_COUNTERS, side_of, waits_table

CPU = {"generator": 2.0, "prm": 1.0, "front": 0.5}
COUNTS = dict.fromkeys(GEN_COUNTERS, 0.0)


def _row(latency: float, steps: int, engine: float, prm: float) -> dict[str, Any]:
    return {
        "correct": True,
        "prompt_tokens": 60,
        "completion_tokens": 600,
        "latency_s": latency,
        "steps": steps,
        "engine_wait_s": engine,
        "prm_wait_s": prm,
    }


def _its_hub_row() -> dict[str, Any]:
    return {"correct": False, "prompt_tokens": 9000, "completion_tokens": 600}


def test_thinkgate_sides_average_what_their_responses_report() -> None:
    rows = [_row(4.0, 20, 3.0, 0.8), _row(2.0, 10, 1.0, 0.4)]
    side = side_of("thinkgate", "particle-filtering", 4, 0, 2.0, rows, COUNTS, COUNTS, 0.0, CPU)
    assert (side.latency_s, side.steps) == (3.0, 15.0)
    assert math.isclose(side.engine_wait_s, 2.0) and math.isclose(side.prm_wait_s, 0.6)
    # A failed request reports nothing: the mean is over the ones that do.
    failed = {"correct": False, "error": "boom", "prompt_tokens": 0, "completion_tokens": 0}
    again = side_of(
        "thinkgate", "particle-filtering", 4, 0, 2.0, [*rows, failed], COUNTS, COUNTS, 0.0, CPU
    )
    assert again.latency_s == 3.0 and again.failed == 1


def test_the_waits_table_lists_thinkgate_and_leaves_its_hub_out() -> None:
    ours = [
        side_of("thinkgate", "particle-filtering", 4, r, 2.0, rows, COUNTS, COUNTS, 0.0, CPU)
        for r, rows in enumerate([[_row(4.0, 20, 3.0, 0.8)], [_row(2.0, 20, 1.0, 0.4)]])
    ]
    theirs = side_of(
        "its_hub", "particle-filtering", 4, 0, 4.0, [_its_hub_row()], COUNTS, COUNTS, 0.0, CPU
    )
    assert math.isnan(theirs.latency_s)
    lines = waits_table([*ours, theirs], [("particle-filtering", 4)], ["thinkgate", "its_hub"])
    rows = [line for line in lines if line.startswith("| particle-filtering")]
    # Latency 3.00 s over 20 steps: the engine 2.00 s (67%, 100 ms a step), the PRM 0.60 s
    # (20%, 30 ms a step), the rest 0.40 s.
    assert rows == [
        "| particle-filtering | 4 | thinkgate | 3.00 | 20.0 | 2.00 (67%, 100 ms) | "
        "0.60 (20%, 30 ms) | 0.40 |"
    ]
    assert waits_table([theirs], [("particle-filtering", 4)], ["its_hub"]) == []
