"""The engine processes a gateway starts leave its process group (engines.
process_group), fast: real forks, no vLLM. A group SIGTERM with a real engine is in
test_lifecycle.py."""

from __future__ import annotations

import os
import signal
import time

import psutil

from engines.local import process_group


def _child_report(read_fd: int, write_fd: int) -> None:
    os.close(read_fd)
    os.write(write_fd, f"{os.getpgrp()} {os.getpid()}".encode())
    os.close(write_fd)
    os._exit(0)


def _fork_and_read() -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _child_report(r, w)
    os.close(w)
    data = os.read(r, 100).decode()
    os.close(r)
    os.waitpid(pid, 0)
    pgrp, child = (int(x) for x in data.split())
    return pgrp, child


def test_a_child_forked_while_starting_an_engine_gets_its_own_group() -> None:
    mine = os.getpgrp()
    with process_group.detached_children():
        assert os.environ[process_group.ENV] == str(os.getpid())
        pgrp, child = _fork_and_read()
    assert pgrp == child != mine
    assert process_group.ENV not in os.environ  # restored


def test_engines_started_side_by_side_keep_the_environment_until_the_last() -> None:
    """The PRM and the reward engine start in two threads at once: the first to finish
    must not take the variable away while the other is still spawning its processes."""
    import threading

    first_in, second_out = threading.Event(), threading.Event()
    seen: list[str | None] = []

    def first() -> None:
        with process_group.detached_children():
            first_in.set()
            second_out.wait(5)
            seen.append(os.environ.get(process_group.ENV))  # still starting

    def second() -> None:
        first_in.wait(5)
        with process_group.detached_children():
            pass
        second_out.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [str(os.getpid())]
    assert process_group.ENV not in os.environ  # restored once both were done


def test_a_child_forked_during_another_threads_start_counts_its_own() -> None:
    """A process forked while a thread of its parent is inside ``detached_children``
    (the suite's test gateway, forked from a worker) must still detach its own engines."""
    import threading

    inside, done = threading.Event(), threading.Event()

    def starting() -> None:
        with process_group.detached_children():
            inside.set()
            done.wait(5)

    t = threading.Thread(target=starting)
    t.start()
    inside.wait(5)
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the forked "gateway": its own start sets its own pid
            with process_group.detached_children():
                ok = os.environ.get(process_group.ENV) == str(os.getpid())
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.close(w)
        got = os.read(r, 1)
        os.close(r)
        os.waitpid(pid, 0)
    finally:
        done.set()
        t.join(5)
    assert got == b"1"


def test_children_forked_at_other_times_stay_in_the_group() -> None:
    with process_group.detached_children():
        pass
    pgrp, _ = _fork_and_read()
    assert pgrp == os.getpgrp()


def test_a_detached_child_stops_itself_when_the_gateway_dies() -> None:
    """A gateway SIGKILLed leaves its detached engine re-parented: the engine's watcher
    sends it SIGTERM instead of letting it linger, unreachable by a group SIGKILL."""
    r, w = os.pipe()
    gateway = os.fork()
    if gateway == 0:  # the "gateway": forks an "engine" that reports its pid, then dies
        os.close(r)
        with process_group.detached_children():
            engine = os.fork()
        if engine == 0:
            signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
            while True:
                time.sleep(0.1)
        os.write(w, str(engine).encode())
        os.close(w)
        os.kill(os.getpid(), signal.SIGKILL)
    os.close(w)
    engine = int(os.read(r, 100).decode())
    os.close(r)
    os.waitpid(gateway, 0)
    # Generous: on a loaded machine the child may wait seconds for a core (it did, over
    # 10 s, beside the slow tier); an engine that keeps running fails however long.
    deadline = time.monotonic() + 60
    while True:
        try:
            if psutil.Process(engine).status() == psutil.STATUS_ZOMBIE:
                break  # exited; whoever adopted it has not reaped it yet
        except psutil.NoSuchProcess:
            break
        assert time.monotonic() < deadline, "the orphaned engine kept running"
        time.sleep(0.1)
