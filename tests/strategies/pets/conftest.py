"""What the PETS batch store tests share: each runs on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres import fresh_database, postgres_server


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's jobs live: a new SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "pets-batches.sqlite3")
    return fresh_database(request.getfixturevalue("pg_url"))
