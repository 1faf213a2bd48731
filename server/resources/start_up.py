"""The engine and the resources at start-up: side by side where they can be.

On a CPU host the generator's engine, the reward model's and the PRM's each take tens of
seconds to start (their processes' imports, the load, the warm-up), and none needs
another: the resource builders need only the served model's name and tokenizer, which
the settings give before the engine is up, so they start beside it. A builder that needs
the engine itself awaits it (``ServedModel.engine``).

On a GPU they start one after the other, as before: each vLLM engine measures the GPU's
free memory while it starts, and another engine loading beside it moves what it measured.
An engine passed in, or the remote engine, is up before the resources are built.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import cast

from core.base import Resources
from core.engine import Engine, ServedModel, all_of
from engines.factory import open_engine
from engines.tokens import TokenizerTokens
from server.resources.builders import ResourceBuilder, build_resources
from server.settings import Settings


async def start_engine_and_resources(
    settings: Settings,
    engine: Engine | None,
    stack: AsyncExitStack,
    *,
    on_exit: Callable[[], None],
    builders: Sequence[ResourceBuilder] | None = None,
) -> tuple[Engine, Resources]:
    """The engine (``engine``, or the one settings pick) and the resources (``builders``:
    the installed ones), both closed by ``stack`` (the resources first)."""
    if engine is not None:
        return engine, await _resources(settings, ServedModel.of(engine), stack, builders)
    tokens = tokenizer_before_start(settings)
    if tokens is None:
        active = await stack.enter_async_context(open_engine(settings, on_exit=on_exit))
        return active, await _resources(settings, ServedModel.of(active), stack, builders)
    started: asyncio.Future[Engine] = asyncio.get_running_loop().create_future()
    served = ServedModel(model_name=settings.model_name, tokens=tokens, started=started)
    engine_stack, resources_stack = AsyncExitStack(), AsyncExitStack()
    stack.push_async_callback(engine_stack.aclose)
    stack.push_async_callback(resources_stack.aclose)  # closes first, as when nested

    async def start() -> Engine:
        try:
            up = await engine_stack.enter_async_context(
                open_engine(settings, on_exit=on_exit, tokens=tokens)
            )
        except BaseException:
            served.started.cancel()  # a builder awaiting the engine stops too
            raise
        served.started.set_result(up)
        return up

    # The first failure cancels the other start (an engine being loaded is closed once
    # it is up) and is raised itself.
    got = await all_of([start(), _resources(settings, served, resources_stack, builders)])
    return cast(Engine, got[0]), cast(Resources, got[1])


def tokenizer_before_start(settings: Settings) -> TokenizerTokens | None:
    """The served model's tokenizer before its engine starts, where the resources may
    start beside it: the local engine on a CPU host (None elsewhere)."""
    if settings.engine != "local":
        return None
    from engines.local.executor import on_cpu

    return TokenizerTokens.for_settings(settings) if on_cpu() else None


async def _resources(
    settings: Settings,
    served: ServedModel,
    stack: AsyncExitStack,
    builders: Sequence[ResourceBuilder] | None,
) -> Resources:
    return await stack.enter_async_context(build_resources(settings, served, builders))
