"""PETS resources of the server: the online allocation table and the batch job store.

``pets_resources`` is a ``server.resources`` builder. The table comes from the
``pets_table`` setting (``--pets-table FILE``; default: the testbed table shipped in
``strategies/pets/tables/``; ``none``: no table, the ``pets`` strategy then uses its
adaptive fallback). A table that exists but does not parse fails start-up loudly. The
batch job store lives in memory; shutdown cancels running jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path

import structlog

from server.settings import Settings
from strategies.engine import Engine
from strategies.pets.batch import RESOURCE_KEY as JOBS_KEY
from strategies.pets.batch import BatchJobs
from strategies.pets.online import TABLE_KEY
from strategies.pets.table import DEFAULT_TABLE, PetsTable

log = structlog.get_logger("thinkgate.pets")


def table_path(settings: Settings) -> Path | None:
    value = settings.pets_table
    if value is None:
        return DEFAULT_TABLE
    if value.strip().lower() in ("", "none"):
        return None
    return Path(value)


async def pets_resources(
    settings: Settings, engine: Engine, stack: AsyncExitStack
) -> Mapping[str, object]:
    items: dict[str, object] = {}
    path = table_path(settings)
    if path is None:
        log.info("pets.table.disabled", fallback="adaptive")
    elif path.exists():
        table = PetsTable.load(path)
        items[TABLE_KEY] = table
        log.info(
            "pets.table.loaded",
            path=str(path),
            average_budget=table.average_budget,
            budgets={b.pattern: b.budget for b in table.buckets},
        )
    elif settings.pets_table is not None:
        raise RuntimeError(f"pets_table {path} does not exist")
    else:
        log.warning("pets.table.missing", path=str(path), fallback="adaptive")
    jobs = BatchJobs(engine)
    stack.push_async_callback(jobs.aclose)
    items[JOBS_KEY] = jobs
    return items
