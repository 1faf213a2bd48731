"""PETS batch jobs in one SQLite file: the default
:class:`~strategies.pets.batches.store.BatchStore`.

Stdlib ``sqlite3`` in WAL mode with ``synchronous=NORMAL``: a commit appends to the
write-ahead log without waiting for the disk, so what a killed gateway had committed
survives (only a power cut may lose the last commits). Every call runs on one worker
thread owned by the store, in the order it was made, so the event loop never waits on
the disk and samples are stored in the order their requests returned. Several gateways
on one machine may share the file (SQLite locks it; a write waits up to 10 s for
another's); not over a network file system.

Schema version 1 (``PRAGMA user_version``); a file of another version is refused at
open rather than guessed at. Token ids are little-endian int32 blobs.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Final, TypeVar, cast

import numpy as np

from core.base import JSON
from core.engine import FinishReason, Sample
from strategies.pets.batches.input import BatchQuestion
from strategies.pets.batches.store import (
    JobRecord,
    Status,
    StoredSample,
    options_from_json,
    options_json,
    sampling_from_json,
    sampling_json,
)

T = TypeVar("T")

SCHEMA_VERSION: Final = 1
FILE_NAME: Final = "pets-batches.sqlite3"  # inside the gateway's --state-dir
BUSY_TIMEOUT_S: Final = 10.0

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    options TEXT NOT NULL,
    n_questions INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    completed_at INTEGER,
    error TEXT,
    owner TEXT,
    lease_until REAL NOT NULL DEFAULT 0,
    resumed INTEGER NOT NULL DEFAULT 0,
    samples_drawn INTEGER NOT NULL DEFAULT 0,
    questions_sampled INTEGER NOT NULL DEFAULT 0,
    rounds INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_by_time ON jobs (created_at, id);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, model, lease_until);
CREATE TABLE IF NOT EXISTS questions (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    custom_id TEXT NOT NULL,
    prompt BLOB NOT NULL,
    thinking_open INTEGER NOT NULL,
    sampling TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS samples (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    question INTEGER NOT NULL,
    round INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    token_ids BLOB NOT NULL,
    finish_reason TEXT NOT NULL,
    cumulative_logprob REAL,
    stop_reason TEXT
);
CREATE INDEX IF NOT EXISTS samples_by_job ON samples (job_id);
CREATE INDEX IF NOT EXISTS samples_by_question ON samples (job_id, question);
CREATE TABLE IF NOT EXISTS outputs (
    job_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
"""
_JOB_COLUMNS: Final = (
    "id, model, status, options, n_questions, created_at, completed_at, error, owner,"
    " lease_until, resumed, samples_drawn, questions_sampled, rounds"
)
# Another holder's lease, or the job no longer in progress: the write is refused.
_HELD: Final = "status = 'in_progress' AND (owner IS NULL OR lease_until < ?)"


class _Refused(Exception):
    """A conditional write found the job not (or no longer) the writer's."""


def _ids_blob(ids: Sequence[int]) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes()


def _ids(blob: bytes) -> tuple[int, ...]:
    return tuple(int(x) for x in np.frombuffer(blob, dtype="<i4"))


def _record(row: Sequence[object]) -> JobRecord:
    (job_id, model, status, options, n, created, completed, error, owner, lease) = row[:10]
    resumed, drawn, sampled, rounds = row[10:]
    return JobRecord(
        id=str(job_id),
        model=str(model),
        status=cast(Status, status),
        options=options_from_json(str(options)),
        n_questions=int(cast(int, n)),
        created_at=int(cast(int, created)),
        completed_at=None if completed is None else int(cast(int, completed)),
        error=None if error is None else str(error),
        owner=None if owner is None else str(owner),
        lease_until=float(cast(float, lease)),
        resumed=int(cast(int, resumed)),
        samples_drawn=int(cast(int, drawn)),
        questions_sampled=int(cast(int, sampled)),
        rounds=int(cast(int, rounds)),
    )


class SqliteBatchStore:
    """Batch jobs in the SQLite file at ``path`` (``":memory:"``: kept in this process
    only). ``clock`` gives wall-clock seconds for leases (tests pass their own)."""

    def __init__(self, path: Path | str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = str(path)
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pets-store")
        # Opened here, used only on the worker thread from now on.
        self._db = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            self._migrate()
        except BaseException:
            self._db.close()
            self._executor.shutdown(wait=False)
            raise

    def _migrate(self) -> None:
        db = self._db
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        with self._write():
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version == 0:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path}: PETS batch store schema {version}; this thinkgate reads"
                    f" schema {SCHEMA_VERSION} (use another --state-dir, or that version)"
                )

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; IMMEDIATE takes the write lock up front, so another
        gateway's writer waits (busy timeout) instead of failing half-way."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # --- BatchStore

    async def create(
        self,
        job: JobRecord,
        questions: Sequence[BatchQuestion],
        *,
        owner: str,
        lease_s: float,
    ) -> None:
        await self._call(partial(self._create, job, tuple(questions), owner, lease_s))

    def _create(
        self, job: JobRecord, questions: Sequence[BatchQuestion], owner: str, lease_s: float
    ) -> None:
        with self._write() as db:
            db.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    job.id,
                    job.model,
                    job.status,
                    options_json(job.options),
                    len(questions),
                    job.created_at,
                    job.completed_at,
                    job.error,
                    owner,
                    self._clock() + lease_s,
                    0,
                    0,
                    0,
                    0,
                ),
            )
            db.executemany(
                "INSERT INTO questions VALUES (?,?,?,?,?,?)",
                (
                    (
                        job.id,
                        i,
                        q.custom_id,
                        _ids_blob(q.prompt_token_ids),
                        int(q.thinking_open),
                        sampling_json(q.sampling),
                    )
                    for i, q in enumerate(questions)
                ),
            )

    async def job(self, job_id: str) -> JobRecord | None:
        return await self._call(partial(self._job, job_id))

    def _job(self, job_id: str) -> JobRecord | None:
        row = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        found = row.fetchone()
        return None if found is None else _record(found)

    async def jobs(
        self, *, status: Status | None = None, after: str | None = None, limit: int = 100
    ) -> list[JobRecord]:
        return await self._call(partial(self._jobs, status, after, limit))

    def _jobs(self, status: Status | None, after: str | None, limit: int) -> list[JobRecord]:
        where: list[str] = []
        args: list[object] = []
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if after is not None:
            where.append("(created_at, id) < (SELECT created_at, id FROM jobs WHERE id = ?)")
            args.append(after)
        sql = f"SELECT {_JOB_COLUMNS} FROM jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        return [_record(r) for r in self._db.execute(sql, (*args, limit))]

    async def questions(self, job_id: str) -> list[BatchQuestion]:
        return await self._call(partial(self._questions, job_id))

    def _questions(self, job_id: str) -> list[BatchQuestion]:
        rows = self._db.execute(
            "SELECT custom_id, prompt, thinking_open, sampling FROM questions"
            " WHERE job_id = ? ORDER BY idx",
            (job_id,),
        )
        return [
            BatchQuestion(
                custom_id=custom_id,
                prompt_token_ids=_ids(prompt),
                thinking_open=bool(thinking_open),
                sampling=sampling_from_json(sampling),
            )
            for custom_id, prompt, thinking_open, sampling in rows
        ]

    async def samples(self, job_id: str) -> list[StoredSample]:
        return await self._call(partial(self._samples, job_id))

    def _samples(self, job_id: str) -> list[StoredSample]:
        rows = self._db.execute(
            "SELECT question, round, idx, token_ids, finish_reason, cumulative_logprob,"
            " stop_reason FROM samples WHERE job_id = ? ORDER BY seq",
            (job_id,),
        )
        return [
            StoredSample(
                question=question,
                round=round_,
                sample=Sample(
                    index=idx,
                    token_ids=_ids(token_ids),
                    finish_reason=cast(FinishReason, finish_reason),
                    cumulative_logprob=logprob,
                    stop_reason=None if stop is None else json.loads(stop),
                ),
            )
            for question, round_, idx, token_ids, finish_reason, logprob, stop in rows
        ]

    async def add_samples(self, job_id: str, owner: str, samples: Sequence[StoredSample]) -> bool:
        return await self._call(partial(self._add_samples, job_id, owner, tuple(samples)))

    def _add_samples(self, job_id: str, owner: str, samples: Sequence[StoredSample]) -> bool:
        if not samples:
            return True
        try:
            with self._write() as db:
                fresh = sum(
                    db.execute(
                        "SELECT 1 FROM samples WHERE job_id = ? AND question = ? LIMIT 1",
                        (job_id, q),
                    ).fetchone()
                    is None
                    for q in {s.question for s in samples}
                )
                cur = db.execute(
                    "UPDATE jobs SET samples_drawn = samples_drawn + ?,"
                    " questions_sampled = questions_sampled + ?, rounds = MAX(rounds, ?)"
                    " WHERE id = ? AND owner = ? AND status = 'in_progress'",
                    (len(samples), fresh, max(s.round for s in samples) + 1, job_id, owner),
                )
                if cur.rowcount != 1:
                    raise _Refused
                db.executemany(
                    "INSERT INTO samples (job_id, question, round, idx, token_ids,"
                    " finish_reason, cumulative_logprob, stop_reason) VALUES (?,?,?,?,?,?,?,?)",
                    (
                        (
                            job_id,
                            s.question,
                            s.round,
                            s.sample.index,
                            _ids_blob(s.sample.token_ids),
                            s.sample.finish_reason,
                            s.sample.cumulative_logprob,
                            None
                            if s.sample.stop_reason is None
                            else json.dumps(s.sample.stop_reason),
                        )
                        for s in samples
                    ),
                )
        except _Refused:
            return False
        return True

    async def finish(
        self,
        job_id: str,
        owner: str | None,
        *,
        status: Status,
        completed_at: int,
        error: str | None = None,
        output: Sequence[Mapping[str, JSON]] = (),
    ) -> bool:
        lines = [json.dumps(line) for line in output]
        return await self._call(
            partial(self._finish, job_id, owner, status, completed_at, error, lines)
        )

    def _finish(
        self,
        job_id: str,
        owner: str | None,
        status: Status,
        completed_at: int,
        error: str | None,
        lines: Sequence[str],
    ) -> bool:
        try:
            with self._write() as db:
                cur = db.execute(
                    "UPDATE jobs SET status = ?, completed_at = ?, error = ?, owner = NULL,"
                    " lease_until = 0 WHERE id = ? AND status = 'in_progress'"
                    " AND (? IS NULL OR owner = ?)",
                    (status, completed_at, error, job_id, owner, owner),
                )
                if cur.rowcount != 1:
                    raise _Refused
                db.executemany(
                    "INSERT INTO outputs VALUES (?,?,?)",
                    ((job_id, i, line) for i, line in enumerate(lines)),
                )
        except _Refused:
            return False
        return True

    async def output(self, job_id: str) -> list[dict[str, JSON]]:
        return await self._call(partial(self._output, job_id))

    def _output(self, job_id: str) -> list[dict[str, JSON]]:
        rows = self._db.execute("SELECT line FROM outputs WHERE job_id = ? ORDER BY idx", (job_id,))
        return [json.loads(line) for (line,) in rows]

    async def claim(self, owner: str, *, model: str, lease_s: float, limit: int) -> list[str]:
        return await self._call(partial(self._claim, owner, model, lease_s, limit))

    def _claim(self, owner: str, model: str, lease_s: float, limit: int) -> list[str]:
        if limit <= 0:
            return []
        now = self._clock()
        got: list[str] = []
        with self._write() as db:
            free = db.execute(
                f"SELECT id FROM jobs WHERE model = ? AND {_HELD} ORDER BY created_at, id LIMIT ?",
                (model, now, limit),
            ).fetchall()
            for (job_id,) in free:
                # Conditional on the lease still being free: the same statement is what
                # keeps two gateways apart on a database without a global write lock.
                cur = db.execute(
                    "UPDATE jobs SET owner = ?, lease_until = ?, resumed = resumed + 1"
                    f" WHERE id = ? AND {_HELD}",
                    (owner, now + lease_s, job_id, now),
                )
                if cur.rowcount == 1:
                    got.append(str(job_id))
        return got

    async def renew(self, job_id: str, owner: str, *, lease_s: float) -> bool:
        return await self._call(partial(self._renew, job_id, owner, lease_s))

    def _renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        cur = self._db.execute(
            "UPDATE jobs SET lease_until = ? WHERE id = ? AND owner = ? AND status = 'in_progress'",
            (self._clock() + lease_s, job_id, owner),
        )
        return cur.rowcount == 1

    async def release(self, job_id: str, owner: str) -> None:
        await self._call(partial(self._release, job_id, owner))

    def _release(self, job_id: str, owner: str) -> None:
        self._db.execute(
            "UPDATE jobs SET owner = NULL, lease_until = 0 WHERE id = ? AND owner = ?",
            (job_id, owner),
        )

    async def aclose(self) -> None:
        await self._call(self._db.close)
        self._executor.shutdown(wait=False)
