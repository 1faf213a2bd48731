"""One SQL connection on SQLite or PostgreSQL, for the stores that keep work across
gateways (the Batch API's files and batches, PETS batch jobs).

A target is a ``postgresql://`` URL (psycopg 3; a fleet's gateways share the database)
or a SQLite file path (``:memory:``: this process only). Statements are written once in
``?`` style; what differs between the two (placeholders, the binary type, how a write
transaction starts) is here. Calls run on one worker thread per connection, in the order
they were made, so an event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")
BUSY_TIMEOUT_S: Final = 30.0  # SQLite: how long a writer waits for another's lock


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    blob: str  # the binary column type
    serial: str  # an auto-increment integer primary key
    greatest: str  # the two-argument maximum

    def sql(self, statement: str) -> str:
        return statement.replace("?", "%s") if self.name == "postgresql" else statement


SQLITE: Final = Dialect("sqlite", "BLOB", "INTEGER PRIMARY KEY AUTOINCREMENT", "MAX")
POSTGRESQL: Final = Dialect("postgresql", "BYTEA", "BIGSERIAL PRIMARY KEY", "GREATEST")


def is_postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def redacted(url: str) -> str:
    """A database URL without its password, for logs and errors."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class Cursor:
    """Statements in ``?`` style on either database."""

    def __init__(self, db: Any, dialect: Dialect) -> None:
        self._db = db
        self._dialect = dialect

    def execute(self, statement: str) -> None:
        self._db.execute(statement)

    def run(self, statement: str, params: Sequence[object] = ()) -> int:
        cur = self._db.execute(self._dialect.sql(statement), tuple(params))
        return int(cur.rowcount)

    def many(self, statement: str, rows: Sequence[Sequence[object]]) -> None:
        if self._dialect.name == "postgresql":
            with self._db.cursor() as cur:
                cur.executemany(self._dialect.sql(statement), [tuple(r) for r in rows])
        else:
            self._db.executemany(statement, [tuple(r) for r in rows])

    def one(self, statement: str, params: Sequence[object] = ()) -> Sequence[Any] | None:
        row = self._db.execute(self._dialect.sql(statement), tuple(params)).fetchone()
        return cast("Sequence[Any] | None", row)

    def all(self, statement: str, params: Sequence[object] = ()) -> list[Sequence[Any]]:
        return list(self._db.execute(self._dialect.sql(statement), tuple(params)).fetchall())


class Connection:
    """One database connection and the worker thread every call to it runs on."""

    def __init__(self, target: str, *, thread_name: str) -> None:
        self.postgres = is_postgres(target)
        self.dialect = POSTGRESQL if self.postgres else SQLITE
        self.target = redacted(target) if self.postgres else target
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._db: Any = self._connect(target)

    def _connect(self, target: str) -> Any:
        if self.postgres:
            import psycopg  # only a fleet's gateways need it

            return psycopg.connect(target, autocommit=True)
        if target != ":memory:":
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(
            target, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        return db

    @contextmanager
    def write(self) -> Iterator[Cursor]:
        """One write transaction. SQLite: IMMEDIATE takes the write lock up front, so
        another gateway's writer waits (busy timeout) instead of failing half-way.
        PostgreSQL: row locks and conditional updates keep gateways apart."""
        cursor = Cursor(self._db, self.dialect)
        if self.postgres:
            with self._db.transaction():
                yield cursor
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield cursor
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def read(self) -> Cursor:
        return Cursor(self._db, self.dialect)

    def schema(self, text: str) -> None:
        """Create what ``text`` (statements separated by ``;``, with ``{blob}``,
        ``{serial}`` for the dialect's types) declares, in one transaction."""
        d = self.dialect
        with self.write() as db:
            for statement in text.format(blob=d.blob, serial=d.serial).split(";"):
                if statement.strip():
                    db.execute(statement)

    def add_column(self, table: str, column: str, kind: str) -> None:
        """Add a column to a table made before it existed (nothing when it has it)."""
        with self.write() as db:
            if self.postgres:
                db.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
                return
            if not any(row[1] == column for row in db.all(f"PRAGMA table_info({table})")):
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    async def call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def close_now(self) -> None:
        """Close from outside the worker (a constructor that failed half-way)."""
        self._db.close()
        self._executor.shutdown(wait=False)

    async def aclose(self) -> None:
        await self.call(self._db.close)
        self._executor.shutdown(wait=False)
