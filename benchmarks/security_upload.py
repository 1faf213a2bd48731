"""The upload line of ``thinkgate bench security``: 1 GiB sent as a chunked multipart upload
to ``/v1/files`` on a server whose file limit is 200 MiB, the bytes made as they are sent
(nothing written here). While it runs, a sampler reads how much disk the server holds:

- ``held``: the regular files the server's processes have open under its temporary
  directory or its state directory, deleted ones included (``/proc/<pid>/fd``): a spooled
  upload is an unlinked temporary file, which no directory listing shows;
- ``dirs``: the bytes of the files in those directories;
- ``filesystem``: the used bytes of their filesystems (others' writes count here too).

Each is reported as its largest growth over its value before the upload.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.security_probes import Line, bearer

MIB = 2**20
CHUNK = b'{"custom_id": "x", "body": {}}\n' * 32768  # ~1 MiB of JSON lines


@dataclass(frozen=True)
class Growth:
    held: int
    dirs: int
    filesystem: int


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        root = psutil.Process(pid)
        return [pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _held(pids: list[int], roots: tuple[Path, ...]) -> int:
    total = 0
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        try:
            entries = list(fds.iterdir())
        except OSError:
            continue
        for fd in entries:
            try:
                target = os.readlink(fd)
                info = os.stat(fd)  # follows the link: the open file, deleted or not
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and any(target.startswith(str(r)) for r in roots):
                total += info.st_blocks * 512
    return total


def _dirs(roots: tuple[Path, ...]) -> int:
    total = 0
    for root in roots:
        for path, _, names in os.walk(root):
            for name in names:
                try:
                    total += os.lstat(os.path.join(path, name)).st_blocks * 512
                except OSError:
                    continue
    return total


def _filesystem(roots: tuple[Path, ...]) -> int:
    devices = {os.stat(r).st_dev: r for r in roots}
    return sum(shutil.disk_usage(r).used for r in devices.values())


class _Sampler(threading.Thread):
    def __init__(self, pid: int, roots: tuple[Path, ...]) -> None:
        super().__init__(daemon=True)
        self.pids, self.roots = _tree(pid), roots
        self.base = Growth(_held(self.pids, roots), _dirs(roots), _filesystem(roots))
        self.peak = Growth(0, 0, 0)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            now = Growth(_held(self.pids, self.roots), _dirs(self.roots), _filesystem(self.roots))
            self.peak = Growth(
                max(self.peak.held, now.held - self.base.held),
                max(self.peak.dirs, now.dirs - self.base.dirs),
                max(self.peak.filesystem, now.filesystem - self.base.filesystem),
            )


def _body(boundary: str, total: int, sent: list[int]) -> Iterator[bytes]:
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    while sent[0] < total:
        chunk = CHUNK[: total - sent[0]]
        sent[0] += len(chunk)
        yield chunk
    yield f"\r\n--{boundary}--\r\n".encode()


def big_upload(
    url: str, key: str, *, pid: int, roots: tuple[Path, ...], total: int, limit: int
) -> Line:
    """``total`` bytes to a ``limit``-byte file limit: refused (a 413, or the connection
    closed before the end), and the disk the server held while refusing it."""
    sampler = _Sampler(pid, roots)
    sampler.start()
    sent = [0]
    boundary = "thinkgate-security-boundary"
    headers = {**bearer(key), "Content-Type": f"multipart/form-data; boundary={boundary}"}
    started = time.perf_counter()
    try:
        r = httpx.post(
            f"{url}/v1/files",
            headers=headers,
            content=_body(boundary, total, sent),
            timeout=httpx.Timeout(600, connect=10),
        )
        outcome, status = f"{r.status_code} {r.text[:120]}", r.status_code
    except httpx.HTTPError as exc:  # the server closed the connection mid-upload
        outcome, status = f"connection ended: {type(exc).__name__}", 0
    seconds = time.perf_counter() - started
    time.sleep(0.5)  # a last sample after the answer
    sampler.stop.set()
    sampler.join()
    peak = sampler.peak
    refused = status == 413 or (status == 0 and sent[0] < total)
    grew = max(peak.held, peak.dirs)
    failures = int(not refused) + int(grew >= limit)
    detail = (
        f"{total / MIB:.0f} MiB chunked to a {limit / MIB:.0f} MiB limit: {outcome}, after "
        f"{sent[0] / MIB:.1f} MiB sent in {seconds:.1f} s; disk growth: held by the server "
        f"{peak.held / MIB:.1f} MiB, in the tmp and state dirs {peak.dirs / MIB:.1f} MiB, "
        f"filesystem {peak.filesystem / MIB:.1f} MiB"
    )
    goal = "refused; growth < limit"
    return Line(
        "1 GiB chunked upload, 200 MiB limit", 1, int(failures > 0), goal, failures == 0, detail
    )
