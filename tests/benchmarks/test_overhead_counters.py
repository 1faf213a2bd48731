"""bench overhead reads the server's stall and frame-wait counters from /metrics text as
the server's own registry renders it."""

from __future__ import annotations

import pytest

from benchmarks.overhead import stall_counters
from server.process.metrics import Metrics


def test_counters_from_a_rendered_registry() -> None:
    m = Metrics()
    for lag in (0.001, 0.02, 0.07):
        m.loop_lag.observe(lag)
    m.gc_pause.labels("0").observe(0.002)
    m.gc_pause.labels("2").observe(0.004)
    for wait in (0.0003, 0.004, 0.012, 0.03):
        m.frame_wait.observe(wait)
    got = stall_counters(m.render().decode())
    assert got["loop_lag_over_10ms"] == 2 and got["loop_lag_over_50ms"] == 1
    assert got["gc_pause_ms"] == pytest.approx(6.0)
    assert got["frames"] == 4 and got["frames_over_10ms"] == 2
    assert got["frame_wait_s"] == pytest.approx(0.0463)


def test_a_server_without_the_counters_reads_as_zero() -> None:
    got = stall_counters("# nothing here\n")
    assert set(got.values()) == {0.0}
