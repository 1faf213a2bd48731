"""PETS resources of the server: the online allocation table and the batch job store.

``pets_resources`` is a ``server.resources.builders`` builder. The table comes from the
``pets_table`` setting (``--pets-table FILE``; default: the testbed table shipped in
``strategies/pets/tables/``; ``none``: no table, the ``pets`` strategy then uses its
adaptive fallback; under ``--profile DIR``, the profile's own table where the fit made
one). A table that exists but does not parse fails start-up loudly. A
table is calibrated on one model (``calibration.model``): the default one, made on the
testbed base model, is left out in front of any other model (logged; ``pets`` then
samples adaptively); one named with ``--pets-table`` is used as told (a warning when it
names another model).

Batch jobs live in ``pets-batches.sqlite3`` under ``--state-dir`` (default
``$XDG_STATE_HOME/thinkgate`` or ``~/.local/state/thinkgate``), or in the PostgreSQL
database of ``--batch-store`` beside the Batch API's batches, and survive restarts:
start-up claims and resumes the unfinished jobs of the served model; shutdown stops
the runners and hands their jobs on (``server.batches.pets.service``). A ``--state-dir``
that cannot be opened fails start-up; when the *default* one cannot (a read-only home),
the demo keeps working with jobs kept in memory only, and the log says so.
"""

from __future__ import annotations

import sqlite3
from contextlib import AsyncExitStack
from pathlib import Path

import structlog

from core import defaults
from core.base import Attached
from core.engine import ServedModel
from core.sql import is_postgres
from server.batches.pets.service import RESOURCE_KEY as JOBS_KEY
from server.batches.pets.service import BatchJobs
from server.batches.pets.sql_store import FILE_NAME, SqlBatchStore
from server.settings import Settings
from strategies.pets.online import TABLE_KEY
from strategies.pets.table import DEFAULT_TABLE, PetsTable
from strategies.profile import Profile

log = structlog.get_logger("thinkgate.pets")


def table_path(settings: Settings) -> Path | None:
    value = settings.pets_table
    if value is None:
        return DEFAULT_TABLE
    if value.strip().lower() in ("", "none"):
        return None
    return Path(value)


async def pets_resources(
    settings: Settings, served: ServedModel, stack: AsyncExitStack
) -> Attached:
    items: Attached = {}
    table = _table(settings, served)
    if table is not None:
        items[TABLE_KEY] = table
    store = open_store(settings)
    stack.push_async_callback(store.aclose)
    jobs = BatchJobs(await served.engine(), store, lease_s=settings.batch_lease_s)
    stack.push_async_callback(jobs.aclose)  # runs first: runners stop, leases released
    await jobs.start()
    items[JOBS_KEY] = jobs
    return items


def _table(settings: Settings, served: ServedModel) -> PetsTable | None:
    """The online allocation table to attach, or None (logged why)."""
    path = table_path(settings)
    named = settings.pets_table is not None
    if not named and settings.profile is not None:
        # A profile's table was fitted on this model (the profile is checked at start).
        own = Profile.load(Path(settings.profile)).pets_table
        path, named = (own, True) if own is not None else (path, named)
    if path is None:
        log.info("pets.table.disabled", fallback="adaptive")
        return None
    if not path.exists():
        if named:
            raise RuntimeError(f"pets_table {path} does not exist")
        log.warning("pets.table.missing", path=str(path), fallback="adaptive")
        return None
    table = PetsTable.load(path)
    made_for = table.calibration.get("model")
    if not made_for_served(made_for, settings, served):
        if not named:
            log.warning(
                "pets.table.other_model",
                path=str(path),
                made_for=made_for,
                served=served.model_name,
                fallback="adaptive",
                hint="thinkgate calibrate pets --server URL --out FILE, then --pets-table FILE",
            )
            return None
        log.warning("pets.table.named_for_other_model", made_for=made_for, served=served.model_name)
    log.info(
        "pets.table.loaded",
        path=str(path),
        average_budget=table.average_budget,
        budgets={b.pattern: b.budget for b in table.buckets},
    )
    return table


def made_for_served(made_for: object, settings: Settings, model: ServedModel) -> bool:
    """Whether a table calibrated on ``made_for`` (a served model name or directory)
    belongs to the served model. ``testbed-base`` is also the testbed base model's
    directory named with ``--model``."""
    if not isinstance(made_for, str):
        return False  # a table that does not say: only when named explicitly
    if made_for == model.model_name:
        return True
    served = Path(settings.model_path).resolve()
    offered = defaults.installed()
    if made_for == offered.served_name:
        return offered.is_default_model(served)
    return served == Path(made_for).resolve()


def open_store(settings: Settings) -> SqlBatchStore:
    """The batch store: the fleet's PostgreSQL database, or a file under the state dir
    (see the module docs for the fallback)."""
    if settings.batch_store is not None and is_postgres(settings.batch_store):
        store = SqlBatchStore(settings.batch_store)
        log.info("pets.batches.store", target=store.target)
        return store
    path = settings.state_path / FILE_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        store = SqlBatchStore(path)
    except (OSError, sqlite3.Error) as exc:
        if settings.state_dir is not None:
            raise RuntimeError(f"cannot open the PETS batch store {path}: {exc}") from exc
        log.warning("pets.batches.in_memory", path=str(path), error=str(exc))
        return SqlBatchStore(":memory:")
    log.info("pets.batches.store", path=str(path))
    return store
