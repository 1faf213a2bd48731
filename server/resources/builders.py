"""Server-wide resources strategies use (reward model, scorers, allocation table, batch
jobs...), built by plugins.

A resource builder is an async function ``(settings, served, stack) -> {ResourceKey:
value}`` that registers its own teardown on ``stack`` (``stack.push_async_callback``);
``served`` (``core.engine.ServedModel``) is the served model's name and tokenizer, and
its engine for a builder that awaits it.
Builders are found through the entry-point group ``thinkgate.resources`` (thinkgate's
own: ``pets``, ``sampling`` in pyproject.toml), so a third-party strategy attaches its
resource by declaring a ``ResourceKey`` next to the code that reads it and a builder in
its own package's entry points, without editing the server. ``build_resources`` runs
once in the lifespan (on a CPU host while the engine starts, elsewhere after it is up),
runs the builders side by side, checks every value against its key's type, and tears
everything down at shutdown. The demo
server (``thinkgate serve`` with no flags) must keep working with every builder's
defaults: a resource whose files are missing is left out (logged), and the strategy that
needs it refuses requests with a clear 4xx/503.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.metadata import entry_points
from typing import Final

import structlog

from core.base import Attached, Resources
from core.engine import ServedModel, all_of
from server.settings import Settings

log = structlog.get_logger("thinkgate.resources")

GROUP: Final = "thinkgate.resources"

ResourceBuilder = Callable[[Settings, ServedModel, AsyncExitStack], Awaitable[Attached]]


def installed_builders() -> tuple[ResourceBuilder, ...]:
    """Every installed builder, by entry-point name (a stable order; keep builders
    independent of each other). A broken plugin fails start-up, naming it."""
    builders: list[ResourceBuilder] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            builder = ep.load()
        except Exception as exc:
            raise RuntimeError(f"failed to load resource builder {ep.value!r}: {exc}") from exc
        if not callable(builder):
            raise RuntimeError(f"resource builder {ep.value!r} is not callable")
        builders.append(builder)
    return tuple(builders)


@asynccontextmanager
async def build_resources(
    settings: Settings,
    served: ServedModel,
    builders: Sequence[ResourceBuilder] | None = None,
) -> AsyncIterator[Resources]:
    """Every builder's items as one ``Resources``; torn down in reverse on exit. The
    builders run side by side (they are independent): the PRM's and the reward model's
    engines then start together, each in a thread, instead of one after the other."""
    items: dict[str, object] = {}
    async with AsyncExitStack() as stack:
        chosen = installed_builders() if builders is None else tuple(builders)

        async def run(build: ResourceBuilder) -> Attached:
            return await build(settings, served, stack)

        built = await all_of(run(build) for build in chosen)
        for build, attached in zip(chosen, built, strict=True):
            for key, value in attached.items():
                if key.name in items:
                    raise RuntimeError(f"resource {key.name!r} attached twice")
                if not isinstance(value, key.kind):
                    raise RuntimeError(
                        f"resource {key.name!r} must be a {key.kind.__name__}, "
                        f"got {type(value).__name__} (from {build.__qualname__})"
                    )
                items[key.name] = value
        log.info("resources.ready", names=sorted(items))
        yield Resources(items=items)
