"""``engines.local.engine_wait``: the vLLM plugin that shortens the engine processes' spin.

In-process unit tests of what the plugin does to vLLM's shared-memory ring; the live
server's engine processes are checked in ``tests/server/test_engine_wait_live.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from vllm.distributed.device_communicators import shm_broadcast as shm

from engines.local import engine_wait


@pytest.fixture
def pristine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """vLLM's own spin and recheck, put back afterwards (the plugin patches globals)."""
    monkeypatch.setattr(shm.SpinCondition.__init__, "__defaults__", (1,))
    monkeypatch.setattr(shm, "SHM_READER_RECHECK_INTERVAL_MS", 5000)
    monkeypatch.delenv(engine_wait.ENV, raising=False)
    yield


def test_unset_leaves_vllm_alone(pristine: None) -> None:
    engine_wait.register()
    assert shm.SpinCondition.__init__.__defaults__ == (1,)
    assert shm.SHM_READER_RECHECK_INTERVAL_MS == 5000


def test_a_short_spin_and_a_short_recheck(pristine: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(engine_wait.ENV, "1")
    engine_wait.register()
    assert shm.SpinCondition.__init__.__defaults__ == (0.001,)
    assert shm.SHM_READER_RECHECK_INTERVAL_MS == engine_wait.RECHECK_MS


def test_the_recheck_can_be_set(pristine: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(engine_wait.ENV, "1")
    monkeypatch.setenv(engine_wait.RECHECK_ENV, "20")
    engine_wait.register()
    assert shm.SHM_READER_RECHECK_INTERVAL_MS == 20


@pytest.mark.parametrize("raw", ["0", "1.5", "soon"])
def test_a_bad_recheck_keeps_the_default(
    pristine: None, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(engine_wait.ENV, "1")
    monkeypatch.setenv(engine_wait.RECHECK_ENV, raw)
    engine_wait.register()
    assert shm.SHM_READER_RECHECK_INTERVAL_MS == engine_wait.RECHECK_MS


def test_a_long_spin_keeps_vllms_recheck(pristine: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(engine_wait.ENV, "2000")
    engine_wait.register()
    assert shm.SpinCondition.__init__.__defaults__ == (2.0,)
    assert shm.SHM_READER_RECHECK_INTERVAL_MS == 5000


@pytest.mark.parametrize("raw", ["fast", "-1", "nan"])
def test_a_bad_value_is_logged_not_raised(
    pristine: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, raw: str
) -> None:
    monkeypatch.setenv(engine_wait.ENV, raw)
    engine_wait.register()  # inside vLLM's engine process: it must never raise
    assert shm.SpinCondition.__init__.__defaults__ == (1,)
    assert engine_wait.ENV in caplog.text


def test_a_new_reader_gets_the_spin(pristine: None) -> None:
    """The patched default is what a reader vLLM builds really uses."""
    import zmq

    engine_wait.apply(0.001)
    ctx = zmq.Context()
    address = "inproc://thinkgate-engine-wait-test"
    try:
        # The writer's end is bound first, as in vLLM: a reader connecting to an inproc
        # address nobody bound leaves a pending connection, and destroying the context
        # then trips libzmq's "Assertion failed: ok (src/ctx.cpp:789)" now and then (the
        # fast tier's intermittent "Fatal Python error: Aborted").
        writer = ctx.socket(zmq.PUB)
        writer.bind(address)
        cond = shm.SpinCondition(True, ctx, address)
        assert cond.busy_loop_s == 0.001
    finally:
        ctx.destroy(linger=0)


def test_export_names_the_spin_for_the_engine_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(engine_wait.ENV, raising=False)
    engine_wait.export(None)  # this suite runs on CPU: the CPU default
    assert engine_wait.CPU_DEFAULT_MS == 1.0
    assert os.environ[engine_wait.ENV] == "1"
    engine_wait.export(250)
    assert os.environ[engine_wait.ENV] == "250"
