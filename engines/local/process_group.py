"""The vLLM engine processes a gateway starts leave its process group, so that a signal
sent to the whole group reaches the gateway alone, which drains and then stops them.

Why: systemd's default ``KillMode=control-group``, supervisord's ``stopasgroup`` and
``kill -- -PGID`` send SIGTERM to every process of the group at once. vLLM's engine core
takes it itself and stops at once, so the requests the gateway was draining failed
(503, exit status 4). Out of the group, the engine processes keep serving until the
gateway has drained and shuts them down (``AsyncLLM.shutdown``: a SIGTERM to each, then
their own clean exit).

How, for both ways vLLM starts a process:

* ``fork`` (vLLM's default on CPU): :func:`detached_children` registers an at-fork hook
  in the gateway; a process forked while it is active calls ``setpgid(0, 0)`` first.
* ``spawn`` (forced where CUDA is initialised): a spawned interpreter does not run
  at-fork hooks, so vLLM's general plugin hook does it (entry point
  ``thinkgate_engine_group``, :func:`register`): a process whose parent is the gateway
  named in :data:`ENV` moves to a group of its own. Its workers, started after, follow it.

Either way a moved process watches its parent: if the gateway dies without stopping it
(SIGKILL), the process sends itself SIGTERM (its own clean shutdown) instead of lingering
as an orphan that a group SIGKILL no longer reaches.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Final

ENV: Final = "THINKGATE_GATEWAY_PID"
"""Set by the gateway while it starts engines: its pid (the parent they must watch)."""
WATCH_INTERVAL_S: Final = 0.5

log = logging.getLogger(__name__)

_active = False  # inherited by forked children: whether to detach in the at-fork hook
_hooked = False
_watching = False
# Engines may start side by side (the PRM and the reward model, each in a thread): the
# environment stays set until the last of them has started its processes.
_lock = threading.Lock()
_starting = 0
_previous: str | None = None


def _fresh_count() -> None:
    # A child forked while another thread was starting an engine inherits that count
    # (and perhaps the held lock): its own starts count from 0.
    global _lock, _starting
    _lock, _starting = threading.Lock(), 0


os.register_at_fork(after_in_child=_fresh_count)


def register() -> None:
    """vLLM general plugin (every process vLLM starts): detach a process whose parent
    is the gateway that named itself in :data:`ENV`. Never raises."""
    raw = os.environ.get(ENV, "")
    if raw.isdigit() and os.getppid() == int(raw):
        _detach(int(raw))


@contextlib.contextmanager
def detached_children() -> Iterator[None]:
    """While active, engine processes this gateway starts go to their own group."""
    global _active, _hooked, _starting, _previous
    with _lock:
        if not _hooked:
            os.register_at_fork(after_in_child=_after_fork)
            _hooked = True
        if _starting == 0:
            _previous = os.environ.get(ENV)
            os.environ[ENV] = str(os.getpid())
            _active = True
        _starting += 1
    try:
        yield
    finally:
        with _lock:
            _starting -= 1
            if _starting == 0:
                _active = False
                if _previous is None:
                    os.environ.pop(ENV, None)
                else:
                    os.environ[ENV] = _previous


def _after_fork() -> None:
    # Only a child of the gateway itself: an engine core's own workers stay in its group.
    if _active and os.environ.get(ENV) == str(os.getppid()):
        _detach(os.getppid())


def _detach(parent: int) -> None:
    global _watching
    if os.getpgrp() != os.getpid():
        try:
            os.setpgid(0, 0)
        except OSError as exc:  # never stop an engine from starting over this
            log.warning("could not leave the gateway's process group: %s", exc)
            return
    if not _watching:
        _watching = True
        threading.Thread(
            target=_watch, args=(parent,), name="thinkgate-parent-watch", daemon=True
        ).start()


def _watch(parent: int) -> None:
    """SIGTERM to this process once ``parent`` is gone (it was re-parented)."""
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    os.kill(os.getpid(), signal.SIGTERM)
