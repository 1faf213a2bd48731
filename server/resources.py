"""Server-wide resources strategies use (reward model, predictor, allocation table...).

``build_resources`` runs once in the lifespan, after the engine is up, and tears
everything down at shutdown. To attach a resource by default, add a builder to
``BUILDERS``: an async function ``(settings, engine, stack) -> {name: object}`` that
registers its own teardown on ``stack`` (``stack.push_async_callback(...)``). Strategies
read it with ``ctx.resources.get(name)`` and own the protocol of what they read.
The demo server (``thinkgate serve`` with no flags) must keep working with every
builder's defaults: a resource whose files are missing should be left out (log why),
and the strategy that needs it should refuse requests with a clear 4xx/503.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

import structlog

from server.pets import pets_resources
from server.scoring import sampling_resources
from server.settings import Settings
from strategies.base import Resources
from strategies.engine import Engine

log = structlog.get_logger("thinkgate.resources")

ResourceBuilder = Callable[[Settings, Engine, AsyncExitStack], Awaitable[Mapping[str, object]]]

# Builders attached by default, in order (later ones may read earlier ones' items
# through the returned mapping only after start-up; keep them independent).
BUILDERS: tuple[ResourceBuilder, ...] = (pets_resources, sampling_resources)


@asynccontextmanager
async def build_resources(
    settings: Settings,
    engine: Engine,
    builders: tuple[ResourceBuilder, ...] = BUILDERS,
) -> AsyncIterator[Resources]:
    """Every builder's items as one ``Resources``; torn down in reverse on exit."""
    items: dict[str, object] = {}
    async with AsyncExitStack() as stack:
        for build in builders:
            built = await build(settings, engine, stack)
            clash = set(built) & set(items)
            if clash:
                raise RuntimeError(f"resource names attached twice: {sorted(clash)}")
            items.update(built)
        log.info("resources.ready", names=sorted(items))
        yield Resources(items=items)
