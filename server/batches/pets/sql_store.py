"""PETS batch jobs in SQLite (one file, the default) or PostgreSQL (shared by a fleet's
gateways, the database of ``--batch-store``): the
:class:`~server.batches.pets.store.BatchStore`.

SQLite runs in WAL mode with ``synchronous=NORMAL``: a commit appends to the write-ahead
log without waiting for the disk, so what a killed gateway had committed survives (only
a power cut may lose the last commits). Several gateways on one machine may share the
file (SQLite locks it; a write waits for another's); not over a network file system:
that is what PostgreSQL is for. Every call runs on one worker thread owned by the store
(``core.sql``), in the order it was made, so the event loop never waits on the database
and samples are stored in the order their requests returned.

The tables are ``tg_pets_*`` (beside the Batch API's ``tg_*`` in a shared database).
SQLite files carry a schema version (``PRAGMA user_version``): version 1 (the same
tables without the prefix) is renamed in place; a file of another version is refused at
open rather than guessed at. Token ids are little-endian int32 blobs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Final, TypeVar, cast

import numpy as np

from core.base import JSON
from core.engine import FinishReason, Sample
from core.sql import Connection
from server.batches.pets.input import BatchQuestion
from server.batches.pets.store import (
    JobRecord,
    Status,
    StoredSample,
    options_from_json,
    options_json,
    sampling_from_json,
    sampling_json,
)

T = TypeVar("T")

SCHEMA_VERSION: Final = 2
FILE_NAME: Final = "pets-batches.sqlite3"  # inside the gateway's --state-dir
_V1_TABLES: Final = ("jobs", "questions", "samples", "outputs")

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS tg_pets_jobs (
    id TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    options TEXT NOT NULL,
    n_questions BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    completed_at BIGINT,
    error TEXT,
    owner TEXT,
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    resumed BIGINT NOT NULL DEFAULT 0,
    samples_drawn BIGINT NOT NULL DEFAULT 0,
    questions_sampled BIGINT NOT NULL DEFAULT 0,
    rounds BIGINT NOT NULL DEFAULT 0,
    tenant TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS tg_pets_jobs_by_time ON tg_pets_jobs (created_at, id);
CREATE INDEX IF NOT EXISTS tg_pets_jobs_by_status ON tg_pets_jobs (status, model, lease_until);
CREATE TABLE IF NOT EXISTS tg_pets_questions (
    job_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    custom_id TEXT NOT NULL,
    prompt {blob} NOT NULL,
    thinking_open INTEGER NOT NULL,
    sampling TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
);
CREATE TABLE IF NOT EXISTS tg_pets_samples (
    seq {serial},
    job_id TEXT NOT NULL,
    question BIGINT NOT NULL,
    round BIGINT NOT NULL,
    idx BIGINT NOT NULL,
    token_ids {blob} NOT NULL,
    finish_reason TEXT NOT NULL,
    cumulative_logprob DOUBLE PRECISION,
    stop_reason TEXT
);
CREATE INDEX IF NOT EXISTS tg_pets_samples_by_question ON tg_pets_samples (job_id, question);
CREATE TABLE IF NOT EXISTS tg_pets_outputs (
    job_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    line TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
)
"""
_JOB_COLUMNS: Final = (
    "id, model, status, options, n_questions, created_at, completed_at, error, owner,"
    " lease_until, resumed, samples_drawn, questions_sampled, rounds, tenant"
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
    resumed, drawn, sampled, rounds, tenant = row[10:]
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
        tenant=str(tenant),
    )


class SqlBatchStore:
    """Batch jobs at ``target``: a SQLite file path (``":memory:"``: this process only)
    or a ``postgresql://`` URL. ``clock`` gives wall-clock seconds for leases (tests
    pass their own)."""

    def __init__(self, target: Path | str, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._conn = Connection(str(target), thread_name="pets-store")
        self.target = self._conn.target
        try:
            self._migrate()
        except BaseException:
            self._conn.close_now()
            raise

    def _migrate(self) -> None:
        if self._conn.postgres:
            self._conn.schema(_SCHEMA)
            return  # the tenant column came with the tables on PostgreSQL
        with self._conn.write() as db:
            row = db.one("PRAGMA user_version")
            version = int(row[0]) if row else 0
            if version == 1:  # the same tables, named before the Batch API shared a database
                for table in _V1_TABLES:
                    db.execute(f"ALTER TABLE {table} RENAME TO tg_pets_{table}")
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version not in (0, SCHEMA_VERSION):
                raise RuntimeError(
                    f"{self.target}: PETS batch store schema {version}; this thinkgate reads"
                    f" schema {SCHEMA_VERSION} (use another --state-dir, or that version)"
                )
        self._conn.schema(_SCHEMA)
        self._conn.add_column("tg_pets_jobs", "tenant", "TEXT NOT NULL DEFAULT ''")
        with self._conn.write() as db:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    async def _call(self, fn: Callable[[], T]) -> T:
        return await self._conn.call(fn)

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
        with self._conn.write() as db:
            db.run(
                f"INSERT INTO tg_pets_jobs ({_JOB_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
                    job.tenant,
                ),
            )
            db.many(
                "INSERT INTO tg_pets_questions VALUES (?,?,?,?,?,?)",
                [
                    (
                        job.id,
                        i,
                        q.custom_id,
                        _ids_blob(q.prompt_token_ids),
                        int(q.thinking_open),
                        sampling_json(q.sampling),
                    )
                    for i, q in enumerate(questions)
                ],
            )

    async def job(self, job_id: str) -> JobRecord | None:
        return await self._call(partial(self._job, job_id))

    def _job(self, job_id: str) -> JobRecord | None:
        found = self._conn.read().one(
            f"SELECT {_JOB_COLUMNS} FROM tg_pets_jobs WHERE id = ?", (job_id,)
        )
        return None if found is None else _record(found)

    async def jobs(
        self,
        *,
        status: Status | None = None,
        after: str | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[JobRecord]:
        return await self._call(partial(self._jobs, status, after, limit, tenant))

    def _jobs(
        self, status: Status | None, after: str | None, limit: int, tenant: str | None
    ) -> list[JobRecord]:
        where: list[str] = []
        args: list[object] = []
        if tenant is not None:
            where.append("tenant IN (?, '')")
            args.append(tenant)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if after is not None:
            where.append(
                "(created_at, id) < (SELECT created_at, id FROM tg_pets_jobs WHERE id = ?)"
            )
            args.append(after)
        sql = f"SELECT {_JOB_COLUMNS} FROM tg_pets_jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        return [_record(r) for r in self._conn.read().all(sql, (*args, limit))]

    async def questions(self, job_id: str) -> list[BatchQuestion]:
        return await self._call(partial(self._questions, job_id))

    def _questions(self, job_id: str) -> list[BatchQuestion]:
        rows = self._conn.read().all(
            "SELECT custom_id, prompt, thinking_open, sampling FROM tg_pets_questions"
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
        rows = self._conn.read().all(
            "SELECT question, round, idx, token_ids, finish_reason, cumulative_logprob,"
            " stop_reason FROM tg_pets_samples WHERE job_id = ? ORDER BY seq",
            (job_id,),
        )
        return [
            StoredSample(
                question=int(question),
                round=int(round_),
                sample=Sample(
                    index=int(idx),
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
        greatest = self._conn.dialect.greatest
        try:
            with self._conn.write() as db:
                changed = db.run(
                    f"UPDATE tg_pets_jobs SET rounds = {greatest}(rounds, ?)"
                    " WHERE id = ? AND owner = ? AND status = 'in_progress'",
                    (max(s.round for s in samples) + 1, job_id, owner),
                )
                if changed != 1:  # the job row is locked from here on (PostgreSQL)
                    raise _Refused
                fresh = sum(
                    db.one(
                        "SELECT 1 FROM tg_pets_samples WHERE job_id = ? AND question = ? LIMIT 1",
                        (job_id, q),
                    )
                    is None
                    for q in {s.question for s in samples}
                )
                db.run(
                    "UPDATE tg_pets_jobs SET samples_drawn = samples_drawn + ?,"
                    " questions_sampled = questions_sampled + ? WHERE id = ?",
                    (len(samples), fresh, job_id),
                )
                db.many(
                    "INSERT INTO tg_pets_samples (job_id, question, round, idx, token_ids,"
                    " finish_reason, cumulative_logprob, stop_reason) VALUES (?,?,?,?,?,?,?,?)",
                    [
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
                    ],
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
        held, args = ("", ()) if owner is None else (" AND owner = ?", (owner,))
        try:
            with self._conn.write() as db:
                changed = db.run(
                    "UPDATE tg_pets_jobs SET status = ?, completed_at = ?, error = ?,"
                    " owner = NULL, lease_until = 0 WHERE id = ? AND status = 'in_progress'" + held,
                    (status, completed_at, error, job_id, *args),
                )
                if changed != 1:
                    raise _Refused
                db.many(
                    "INSERT INTO tg_pets_outputs VALUES (?,?,?)",
                    [(job_id, i, line) for i, line in enumerate(lines)],
                )
        except _Refused:
            return False
        return True

    async def output(self, job_id: str) -> list[dict[str, JSON]]:
        return await self._call(partial(self._output, job_id))

    def _output(self, job_id: str) -> list[dict[str, JSON]]:
        rows = self._conn.read().all(
            "SELECT line FROM tg_pets_outputs WHERE job_id = ? ORDER BY idx", (job_id,)
        )
        return [json.loads(line) for (line,) in rows]

    async def claim(self, owner: str, *, model: str, lease_s: float, limit: int) -> list[str]:
        return await self._call(partial(self._claim, owner, model, lease_s, limit))

    def _claim(self, owner: str, model: str, lease_s: float, limit: int) -> list[str]:
        if limit <= 0:
            return []
        now = self._clock()
        got: list[str] = []
        with self._conn.write() as db:
            free = db.all(
                f"SELECT id FROM tg_pets_jobs WHERE model = ? AND {_HELD}"
                " ORDER BY created_at, id LIMIT ?",
                (model, now, limit),
            )
            for (job_id,) in free:
                # Conditional on the lease still being free: the same statement is what
                # keeps two gateways apart on a database without a global write lock.
                changed = db.run(
                    "UPDATE tg_pets_jobs SET owner = ?, lease_until = ?, resumed = resumed + 1"
                    f" WHERE id = ? AND {_HELD}",
                    (owner, now + lease_s, job_id, now),
                )
                if changed == 1:
                    got.append(str(job_id))
        return got

    async def renew(self, job_id: str, owner: str, *, lease_s: float) -> bool:
        return await self._call(partial(self._renew, job_id, owner, lease_s))

    def _renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        with self._conn.write() as db:
            changed = db.run(
                "UPDATE tg_pets_jobs SET lease_until = ?"
                " WHERE id = ? AND owner = ? AND status = 'in_progress'",
                (self._clock() + lease_s, job_id, owner),
            )
        return changed == 1

    async def release(self, job_id: str, owner: str) -> None:
        await self._call(partial(self._release, job_id, owner))

    def _release(self, job_id: str, owner: str) -> None:
        with self._conn.write() as db:
            db.run(
                "UPDATE tg_pets_jobs SET owner = NULL, lease_until = 0 WHERE id = ? AND owner = ?",
                (job_id, owner),
            )

    async def aclose(self) -> None:
        await self._conn.aclose()
