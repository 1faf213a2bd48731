"""The throwaway PostgreSQL server of the store tests (benchmarks.postgres), and a fresh
database on it for a test that must not see another's rows."""

import uuid

from benchmarks.postgres import postgres_server

__all__ = ["fresh_database", "postgres_server"]


def fresh_database(url: str) -> str:
    """A new, empty database on the server of ``url``; its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + "/" + name
