"""``auto``'s calibrated table as a server resource (a ``server.resources.builders`` builder).

The ``auto_table`` setting names the file (``--auto-table FILE``); unset, the testbed table
shipped in ``strategies/auto_tables/`` is used, in front of the testbed model only (a
table calibrated on one model says nothing about another: ``auto`` then plans by its
rule, and the log says so); ``none`` turns the table off. A named file that is missing or
does not parse fails start-up. A profile (``--profile DIR``, ``thinkgate fit``) brings
its own table, and is refused in front of another model than it was fitted on.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import structlog

from core.base import Attached
from core.engine import ServedModel
from server.resources.pets import made_for_served
from server.settings import Settings
from strategies.auto import DEFAULT_TABLE, TABLE_KEY, AutoTable
from strategies.profile import PROFILE_KEY, Profile

log = structlog.get_logger("thinkgate.auto")


async def auto_resources(
    settings: Settings, served: ServedModel, stack: AsyncExitStack
) -> Attached:
    if settings.profile is not None:
        profile = Profile.load(Path(settings.profile))
        profile.check(served.model_name, served.tokens)  # another model's: start refused
        log.info("auto.profile.loaded", profile=profile.name, plans=len(profile.table.rows))
        return {TABLE_KEY: profile.table, PROFILE_KEY: profile}
    value = settings.auto_table
    if value is not None and value.strip().lower() in ("", "none"):
        log.info("auto.table.disabled", fallback="rule")
        return {}
    named = value is not None
    path = Path(value) if value is not None else DEFAULT_TABLE
    if not path.exists():
        if named:
            raise RuntimeError(f"auto_table {path} does not exist")
        log.info("auto.table.missing", path=str(path), fallback="rule")
        return {}
    table = AutoTable.load(path)
    if not made_for_served(table.model, settings, served):
        if not named:
            log.info("auto.table.other_model", made_for=table.model, fallback="rule")
            return {}
        log.warning("auto.table.named_for_other_model", made_for=table.model)
    log.info("auto.table.loaded", path=str(path), plans=len(table.rows))
    return {TABLE_KEY: table}
