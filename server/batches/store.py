"""Where files, batches and their lines are kept: one SQL store, two databases.

SQLite (``batches.sqlite3`` under ``--state-dir``) is the embedded default; with
``--batch-store postgresql://...`` every gateway of a fleet shares one PostgreSQL
database (psycopg 3), so any replica answers any batch call and a dead replica's batches
are taken over. The SQL is the same for both; the differences (placeholders, the binary
type, how a write transaction starts) are in ``core.sql``.

Running a batch takes its **lease**: an owner (one gateway process) and an expiry,
renewed by heartbeat (``renew``). A batch whose lease lapsed (its gateway died or
stalled) is claimed by another gateway (``claim``: a conditional update, so two
claimants cannot both win). Each line's answer is recorded only while the line has none
(``record``): a line a dead gateway was running is run again by its successor, and the
first answer recorded is the one kept, so every line is answered exactly once.

Calls run on one worker thread per store (``asyncio`` callers await them), so the event
loop never waits on the database.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Final, TypeVar, cast

from core.base import JSON
from core.sql import Connection, Cursor
from server.batches import file_parts
from server.batches.file_parts import FileParts
from server.batches.records import (
    RUNNABLE,
    BatchRecord,
    BatchStatus,
    Counts,
    FileRecord,
    Line,
)

T = TypeVar("T")
SQLITE_FILE: Final = "batches.sqlite3"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS tg_files (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, purpose TEXT NOT NULL,
    filename TEXT NOT NULL, bytes BIGINT NOT NULL, created_at BIGINT NOT NULL,
    content {blob} NOT NULL
);
CREATE INDEX IF NOT EXISTS tg_files_owner ON tg_files (owner, created_at);
CREATE TABLE IF NOT EXISTS tg_batches (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, endpoint TEXT NOT NULL,
    input_file_id TEXT NOT NULL, status TEXT NOT NULL, created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL, metadata TEXT, errors TEXT, output_file_id TEXT,
    error_file_id TEXT, times TEXT NOT NULL, total BIGINT NOT NULL,
    lease_owner TEXT, lease_until DOUBLE PRECISION NOT NULL DEFAULT 0, allocation TEXT
);
CREATE INDEX IF NOT EXISTS tg_batches_owner ON tg_batches (owner, created_at);
CREATE TABLE IF NOT EXISTS tg_batch_lines (
    batch_id TEXT NOT NULL, idx BIGINT NOT NULL, custom_id TEXT NOT NULL,
    body TEXT NOT NULL, result TEXT, ok INTEGER, answered_by TEXT,
    PRIMARY KEY (batch_id, idx)
)
"""
_FILE_COLUMNS: Final = "id, owner, purpose, filename, bytes, created_at"
_BATCH_COLUMNS: Final = (
    "id, owner, endpoint, input_file_id, status, created_at, expires_at, metadata, errors, "
    "output_file_id, error_file_id, times, allocation"
)
_FREE: Final = "(lease_owner IS NULL OR lease_until < ?)"


class BatchStore:
    """Files, batches and lines in SQLite or PostgreSQL (see the module docs)."""

    def __init__(self, target: str, *, clock: Callable[[], float] = time.time) -> None:
        """``target``: a ``postgresql://`` URL, or a SQLite file path (``:memory:``)."""
        self._clock = clock
        self._conn = Connection(target, thread_name="batch-store")
        self.postgres = self._conn.postgres
        self.target = self._conn.target
        self._url = target  # with its password: what a helper process connects to
        try:
            self._conn.schema(_SCHEMA)
            # Added after the first release of the table.
            self._conn.add_column("tg_batches", "allocation", "TEXT")
            self._conn.schema(file_parts.SCHEMA)
            self.parts = FileParts(self._conn, clock)
            self.parts.sweep()
        except BaseException:
            self._conn.close_now()
            raise

    def _write(self) -> AbstractContextManager[Cursor]:
        return self._conn.write()

    def _read(self) -> Cursor:
        return self._conn.read()

    async def _call(self, fn: Callable[[], T]) -> T:
        return await self._conn.call(fn)

    async def aclose(self) -> None:
        await self._conn.aclose()

    # --- files

    async def create_file(self, record: FileRecord, content: bytes) -> None:
        await self._call(partial(self._create_file, record, content))

    def _create_file(self, record: FileRecord, content: bytes) -> None:
        with self._write() as db:
            _insert_file(db, record, content)

    async def file(self, file_id: str) -> FileRecord | None:
        return await self._call(partial(self._file, file_id))

    def _file(self, file_id: str) -> FileRecord | None:
        row = self._read().one(f"SELECT {_FILE_COLUMNS} FROM tg_files WHERE id = ?", (file_id,))
        return None if row is None else _file_record(row)

    async def content(self, file_id: str) -> bytes | None:
        return await self._call(partial(self._content, file_id))

    def _content(self, file_id: str) -> bytes | None:
        db = self._read()
        row = db.one("SELECT content FROM tg_files WHERE id = ?", (file_id,))
        return None if row is None else bytes(row[0]) + file_parts.joined(db, file_id)

    async def inline(self, file_id: str) -> bytes | None:
        """The bytes a file keeps in its row (an output file's; an upload's are in
        ``parts``); None when there is no such file."""
        return await self._call(partial(self._inline, file_id))

    def _inline(self, file_id: str) -> bytes | None:
        row = self._read().one("SELECT content FROM tg_files WHERE id = ?", (file_id,))
        return None if row is None else bytes(row[0])

    async def files(
        self, owner: str, *, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        return await self._call(partial(self._files, owner, purpose, after, limit))

    def _files(
        self, owner: str, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        where, params = "owner = ?", [owner]
        if purpose is not None:
            where += " AND purpose = ?"
            params.append(purpose)
        where, params = _before(where, params, "tg_files", after)
        rows = self._read().all(
            f"SELECT {_FILE_COLUMNS} FROM tg_files WHERE {where} "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit),
        )
        return [_file_record(r) for r in rows]

    async def delete_file(self, file_id: str, owner: str) -> bool:
        return await self._call(partial(self._delete_file, file_id, owner))

    def _delete_file(self, file_id: str, owner: str) -> bool:
        with self._write() as db:
            gone = db.run("DELETE FROM tg_files WHERE id = ? AND owner = ?", (file_id, owner))
            if gone == 1:
                file_parts.drop(db, file_id)
            return gone == 1

    # --- batches

    async def create_batch(self, record: BatchRecord, lines: Sequence[Line]) -> None:
        await self._call(partial(self._create_batch, record, tuple(lines)))

    def _create_batch(self, record: BatchRecord, lines: tuple[Line, ...]) -> None:
        with self._write() as db:
            db.run(
                f"INSERT INTO tg_batches ({_BATCH_COLUMNS}, total) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.owner,
                    record.endpoint,
                    record.input_file_id,
                    record.status,
                    record.created_at,
                    record.expires_at,
                    None if record.metadata is None else json.dumps(record.metadata),
                    json.dumps(list(record.errors)) if record.errors else None,
                    record.output_file_id,
                    record.error_file_id,
                    json.dumps(record.times),
                    None if record.allocation is None else json.dumps(record.allocation),
                    len(lines),
                ),
            )
            db.many(
                "INSERT INTO tg_batch_lines (batch_id, idx, custom_id, body) VALUES (?, ?, ?, ?)",
                [(record.id, ln.index, ln.custom_id, json.dumps(ln.body)) for ln in lines],
            )

    async def batch(self, batch_id: str) -> tuple[BatchRecord, Counts] | None:
        return await self._call(partial(self._batch, batch_id))

    def _batch(self, batch_id: str) -> tuple[BatchRecord, Counts] | None:
        db = self._read()
        row = db.one(f"SELECT {_BATCH_COLUMNS} FROM tg_batches WHERE id = ?", (batch_id,))
        if row is None:
            return None
        return _batch_record(row), self._counts(db, batch_id)

    def _counts(self, db: Cursor, batch_id: str) -> Counts:
        total = db.one("SELECT total FROM tg_batches WHERE id = ?", (batch_id,))
        done = db.all(
            "SELECT ok, COUNT(*) FROM tg_batch_lines WHERE batch_id = ? AND result IS NOT NULL "
            "GROUP BY ok",
            (batch_id,),
        )
        by = {int(ok): int(n) for ok, n in done}
        return Counts(
            total=int(total[0]) if total else 0, completed=by.get(1, 0), failed=by.get(0, 0)
        )

    async def batches(
        self, owner: str, *, after: str | None, limit: int
    ) -> list[tuple[BatchRecord, Counts]]:
        return await self._call(partial(self._batches, owner, after, limit))

    def _batches(
        self, owner: str, after: str | None, limit: int
    ) -> list[tuple[BatchRecord, Counts]]:
        db = self._read()
        where, params = _before("owner = ?", [owner], "tg_batches", after)
        rows = db.all(
            f"SELECT {_BATCH_COLUMNS} FROM tg_batches WHERE {where} "
            "ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, limit),
        )
        return [(_batch_record(r), self._counts(db, str(r[0]))) for r in rows]

    async def queued_lines(self, owner: str) -> int:
        """Lines not yet answered in ``owner``'s batches that are still running."""
        sql = (
            "SELECT COUNT(*) FROM tg_batch_lines l JOIN tg_batches b ON l.batch_id = b.id "
            "WHERE b.owner = ? AND b.status IN (?, ?) AND l.result IS NULL"
        )
        row = await self._call(partial(self._read().one, sql, (owner, *RUNNABLE)))
        return 0 if row is None else int(row[0])

    async def cancel(self, batch_id: str) -> bool:
        """Mark a batch that is not over as cancelling; its runner finalises it."""
        return await self._call(partial(self._cancel, batch_id))

    def _cancel(self, batch_id: str) -> bool:
        with self._write() as db:
            return self._transition(db, batch_id, "cancelling", ("validating", "in_progress"))

    def _transition(
        self,
        db: Cursor,
        batch_id: str,
        status: BatchStatus,
        allowed: Sequence[str],
        **columns: object,
    ) -> bool:
        row = db.one("SELECT status, times FROM tg_batches WHERE id = ?", (batch_id,))
        if row is None or row[0] not in allowed:
            return False
        times = {**json.loads(row[1]), status: int(self._clock())}
        sets = ", ".join(f"{name} = ?" for name in ("status", "times", *columns))
        marks = ", ".join("?" for _ in allowed)
        return (
            db.run(
                f"UPDATE tg_batches SET {sets} WHERE id = ? AND status IN ({marks})",
                (status, json.dumps(times), *columns.values(), batch_id, *allowed),
            )
            == 1
        )

    # --- running

    async def claim(self, owner: str, *, lease_s: float, limit: int) -> list[str]:
        return await self._call(partial(self._claim, owner, lease_s, limit))

    def _claim(self, owner: str, lease_s: float, limit: int) -> list[str]:
        if limit <= 0:
            return []
        now = self._clock()
        got: list[str] = []
        with self._write() as db:
            free = db.all(
                "SELECT id FROM tg_batches WHERE status IN (?, ?) AND "
                f"{_FREE} ORDER BY created_at, id LIMIT ?",
                (*RUNNABLE, now, limit),
            )
            for (batch_id,) in free:
                # Conditional on the lease still being free: what keeps two gateways
                # apart when both saw it free.
                if (
                    db.run(
                        f"UPDATE tg_batches SET lease_owner = ?, lease_until = ? "
                        f"WHERE id = ? AND {_FREE}",
                        (owner, now + lease_s, batch_id, now),
                    )
                    == 1
                ):
                    got.append(str(batch_id))
        return got

    async def renew(self, batch_id: str, owner: str, *, lease_s: float) -> str | None:
        """Extend the lease; the batch's status while ``owner`` holds it, None once not."""
        return await self._call(partial(self._renew, batch_id, owner, lease_s))

    def _renew(self, batch_id: str, owner: str, lease_s: float) -> str | None:
        with self._write() as db:
            renewed = db.run(
                "UPDATE tg_batches SET lease_until = ? WHERE id = ? AND lease_owner = ? "
                "AND status IN (?, ?)",
                (self._clock() + lease_s, batch_id, owner, *RUNNABLE),
            )
            if renewed != 1:
                return None
            row = db.one("SELECT status FROM tg_batches WHERE id = ?", (batch_id,))
            return None if row is None else str(row[0])

    async def release(self, batch_id: str, owner: str) -> None:
        await self._call(partial(self._release, batch_id, owner))

    def _release(self, batch_id: str, owner: str) -> None:
        with self._write() as db:
            db.run(
                "UPDATE tg_batches SET lease_owner = NULL, lease_until = 0 "
                "WHERE id = ? AND lease_owner = ?",
                (batch_id, owner),
            )

    async def pending(self, batch_id: str, limit: int) -> list[Line]:
        return await self._call(partial(self._pending, batch_id, limit))

    def _pending(self, batch_id: str, limit: int) -> list[Line]:
        rows = self._read().all(
            "SELECT idx, custom_id, body FROM tg_batch_lines WHERE batch_id = ? "
            "AND result IS NULL ORDER BY idx LIMIT ?",
            (batch_id, limit),
        )
        return [Line(index=int(i), custom_id=str(c), body=json.loads(b)) for i, c, b in rows]

    async def record(
        self, batch_id: str, index: int, result: dict[str, JSON], *, ok: bool, owner: str
    ) -> bool:
        """Keep a line's answer unless it has one (True: this one was kept)."""
        return await self._call(partial(self._record, batch_id, index, result, ok, owner))

    def _record(
        self, batch_id: str, index: int, result: dict[str, JSON], ok: bool, owner: str
    ) -> bool:
        with self._write() as db:
            return (
                db.run(
                    "UPDATE tg_batch_lines SET result = ?, ok = ?, answered_by = ? "
                    "WHERE batch_id = ? AND idx = ? AND result IS NULL",
                    (json.dumps(result), int(ok), owner, batch_id, index),
                )
                == 1
            )

    async def answers(self, batch_id: str) -> list[tuple[int, bool, dict[str, JSON]]]:
        """Every recorded answer: (index, ok, line), in input order."""
        return await self._call(partial(self._answers, batch_id))

    def _answers(self, batch_id: str) -> list[tuple[int, bool, dict[str, JSON]]]:
        rows = self._read().all(
            "SELECT idx, ok, result FROM tg_batch_lines WHERE batch_id = ? "
            "AND result IS NOT NULL ORDER BY idx",
            (batch_id,),
        )
        return [(int(i), bool(ok), json.loads(r)) for i, ok, r in rows]

    async def answered_by(self, batch_id: str) -> dict[str, int]:
        """Lines answered per gateway (the benchmark's and tests' view of a takeover)."""
        return await self._call(partial(self._answered_by, batch_id))

    def _answered_by(self, batch_id: str) -> dict[str, int]:
        rows = self._read().all(
            "SELECT answered_by, COUNT(*) FROM tg_batch_lines WHERE batch_id = ? "
            "AND result IS NOT NULL GROUP BY answered_by",
            (batch_id,),
        )
        return {str(o): int(n) for o, n in rows}

    async def finalize(
        self,
        batch_id: str,
        owner: str,
        files: Sequence[tuple[FileRecord, bytes]],
        *,
        output_file_id: str | None,
        error_file_id: str | None,
        expired: bool = False,
    ) -> bool:
        """Write the output and error files and end the batch (completed; cancelled if
        it was being cancelled; expired if its window closed), if ``owner`` holds it."""
        return await self._call(
            partial(
                self._finalize,
                batch_id,
                owner,
                tuple(files),
                output_file_id,
                error_file_id,
                expired,
            )
        )

    def _finalize(
        self,
        batch_id: str,
        owner: str,
        files: tuple[tuple[FileRecord, bytes], ...],
        output_file_id: str | None,
        error_file_id: str | None,
        expired: bool,
    ) -> bool:
        with self._write() as db:
            row = db.one(
                "SELECT status FROM tg_batches WHERE id = ? AND lease_owner = ?",
                (batch_id, owner),
            )
            if row is None or row[0] not in RUNNABLE:
                return False
            for record, content in files:
                _insert_file(db, record, content)
            status: BatchStatus = "cancelled" if row[0] == "cancelling" else "completed"
            if expired and status == "completed":
                status = "expired"
            return self._transition(
                db,
                batch_id,
                status,
                RUNNABLE,
                output_file_id=output_file_id,
                error_file_id=error_file_id,
                lease_owner=None,
                lease_until=0,
            )


def _insert_file(db: Cursor, record: FileRecord, content: bytes) -> None:
    db.run(
        f"INSERT INTO tg_files ({_FILE_COLUMNS}, content) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            record.id,
            record.owner,
            record.purpose,
            record.filename,
            record.bytes,
            record.created_at,
            content,
        ),
    )


def _before(where: str, params: list[Any], table: str, after: str | None) -> tuple[str, list[Any]]:
    """A page after cursor ``after`` (an id): the rows listed after it, newest first."""
    if after is None:
        return where, params
    where += f" AND (created_at, id) < (SELECT created_at, id FROM {table} WHERE id = ?)"
    return where, [*params, after]


def _file_record(row: Sequence[Any]) -> FileRecord:
    return FileRecord(
        id=str(row[0]),
        owner=str(row[1]),
        purpose=str(row[2]),
        filename=str(row[3]),
        bytes=int(row[4]),
        created_at=int(row[5]),
    )


def _batch_record(row: Sequence[Any]) -> BatchRecord:
    return BatchRecord(
        id=str(row[0]),
        owner=str(row[1]),
        endpoint=str(row[2]),
        input_file_id=str(row[3]),
        status=cast("BatchStatus", str(row[4])),
        created_at=int(row[5]),
        expires_at=int(row[6]),
        metadata=None if row[7] is None else json.loads(row[7]),
        errors=tuple(json.loads(row[8])) if row[8] else (),
        output_file_id=None if row[9] is None else str(row[9]),
        error_file_id=None if row[10] is None else str(row[10]),
        times=json.loads(row[11]),
        allocation=None if row[12] is None else json.loads(row[12]),
    )
