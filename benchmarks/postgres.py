"""A throwaway PostgreSQL server for the batch store's tests and ``thinkgate bench
batches``: Debian's binaries, a fresh cluster in a temporary directory, on a free
loopback port, trust authentication; stopped at the end. PostgreSQL refuses to run as
root, so as root it runs as the ``postgres`` user."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    if not found[-1]:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return found[-1]


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server's URL (database ``postgres``, user ``postgres``)."""
    root = Path(tempfile.mkdtemp(prefix="thinkgate-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = {"check": True, "capture_output": True, "cwd": root}
    subprocess.run(
        _as_postgres(
            [_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        ),
        **run,  # type: ignore[call-overload]
    )
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off"
    subprocess.run(
        _as_postgres(
            [_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"]
        ),
        **run,  # type: ignore[call-overload]
    )
    try:
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        _wait(url)
        yield url
    finally:
        subprocess.run(
            _as_postgres([_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            cwd=root,
        )
        shutil.rmtree(root, ignore_errors=True)


def _wait(url: str) -> None:
    import psycopg

    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg.connect(url).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
