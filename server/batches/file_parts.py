"""An uploaded file's bytes in parts of ``PART_BYTES``: written to the store as they are
read from the upload's spool and read back one part at a time, so neither an upload nor
a download holds the whole file in the gateway's memory (a 200 MB file was held whole,
twice, on its way in).

A file's row in ``tg_files`` is written only after its last part: a file is visible
whole or not at all. Parts whose upload died half-way (the gateway killed mid-write) have
no row; they are swept once they are older than ``ORPHAN_AFTER_S``, long enough that
another replica's upload still in progress on a shared PostgreSQL is never swept.
Output files written by the batch runner keep their bytes in the row's ``content``; a
file's bytes are its row's ``content`` followed by its parts.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Final

from core.sql import Connection, Cursor

PART_BYTES: Final = 1 << 20
ORPHAN_AFTER_S: Final = 24 * 3600.0

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS tg_file_parts (
    file_id TEXT NOT NULL, seq BIGINT NOT NULL, data {blob} NOT NULL,
    written_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (file_id, seq)
)
"""


class FileParts:
    """The parts table of one store's connection (its worker thread runs every call)."""

    def __init__(self, conn: Connection, clock: Callable[[], float] = time.time) -> None:
        self._conn = conn
        self._clock = clock

    def sweep(self) -> int:
        """Drop the parts of uploads that never finished (run at start, synchronously)."""
        with self._conn.write() as db:
            return db.run(
                "DELETE FROM tg_file_parts WHERE written_at < ? "
                "AND file_id NOT IN (SELECT id FROM tg_files)",
                (self._clock() - ORPHAN_AFTER_S,),
            )

    async def write(self, file_id: str, chunks: AsyncIterator[bytes]) -> int:
        """Store ``chunks`` as the parts of ``file_id`` (their sizes as they come, at
        most ``PART_BYTES`` each is the caller's to keep); returns the bytes written. On
        any failure the parts written so far are dropped before the error goes on."""
        size = seq = 0
        try:
            async for chunk in chunks:
                if not chunk:
                    continue
                await self._conn.call(partial(self._put, file_id, seq, chunk))
                size += len(chunk)
                seq += 1
        except BaseException:
            await self.discard(file_id)
            raise
        return size

    async def discard(self, file_id: str) -> None:
        await self._conn.call(partial(self._drop_parts, file_id))

    def _put(self, file_id: str, seq: int, chunk: bytes) -> None:
        with self._conn.write() as db:
            db.run(
                "INSERT INTO tg_file_parts (file_id, seq, data, written_at) VALUES (?, ?, ?, ?)",
                (file_id, seq, chunk, self._clock()),
            )

    def _drop_parts(self, file_id: str) -> None:
        with self._conn.write() as db:
            drop(db, file_id)

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        """The parts of ``file_id`` in order, each fetched when the reader wants it."""
        seq = 0
        while True:
            part = await self._conn.call(partial(self._part, file_id, seq))
            if part is None:
                return
            yield part
            seq += 1

    def _part(self, file_id: str, seq: int) -> bytes | None:
        row = self._conn.read().one(
            "SELECT data FROM tg_file_parts WHERE file_id = ? AND seq = ?", (file_id, seq)
        )
        return None if row is None else bytes(row[0])


def joined(db: Cursor, file_id: str) -> bytes:
    """All of a file's parts, joined (what a batch reads to parse its lines)."""
    rows = db.all("SELECT data FROM tg_file_parts WHERE file_id = ? ORDER BY seq", (file_id,))
    return b"".join(bytes(r[0]) for r in rows)


def drop(db: Cursor, file_id: str) -> None:
    db.run("DELETE FROM tg_file_parts WHERE file_id = ?", (file_id,))
