"""The engine a gateway runs on, picked by settings (``--engine local|remote``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import structlog

from core.engine import Engine
from engines.settings import EngineSettings

log = structlog.get_logger("thinkgate.engine")


@asynccontextmanager
async def open_engine(
    settings: EngineSettings, *, on_exit: Callable[[], None] | None = None
) -> AsyncIterator[Engine]:
    """Start the configured engine, yield it, close it (also when start-up fails later).

    ``local``: vLLM's ``AsyncLLM`` in this process (the default), supervised by the
    ``on_engine_death`` policy (``on_exit`` is how the ``exit`` policy stops the process).
    ``remote``: the vLLM OpenAI servers at ``settings.vllm_urls`` (their failures are the
    remote engine's failover); nothing of vLLM is imported here then.
    """
    engine: Engine
    if settings.engine == "remote":
        from engines.remote.engine import RemoteEngine

        engine = await RemoteEngine.start(settings)
    else:
        from engines.local.engine import LocalEngine
        from engines.local.supervised import SupervisedEngine

        supervised = SupervisedEngine(
            LocalEngine.start(settings),
            policy=settings.on_engine_death,
            start=lambda: LocalEngine.start(settings),
            on_exit=on_exit or (lambda: None),
        )
        supervised.watch()
        engine = supervised
    log.info("engine.started", kind=settings.engine, model=engine.model_name)
    try:
        yield engine
    finally:
        await engine.aclose()
