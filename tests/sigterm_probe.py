"""Run by tests/test_harness_signals.py in a pytest of its own (never collected by the
suite: the name is not ``test_*``): a module fixture starts a child in its own process
group, as the suite's servers are started, and the test waits until it is signalled."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        Path(os.environ["PROBE_DIR"], "torn-down").write_text("yes")


def test_waits_for_a_signal(child: subprocess.Popen[bytes]) -> None:
    Path(os.environ["PROBE_DIR"], "child.pid").write_text(str(child.pid))
    time.sleep(120)
