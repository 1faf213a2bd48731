"""The engine a gateway runs on, picked by settings (``--engine local|remote``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import structlog

from server.settings import Settings
from strategies.engine import Engine

log = structlog.get_logger("thinkgate.engine")


@asynccontextmanager
async def open_engine(settings: Settings) -> AsyncIterator[Engine]:
    """Start the configured engine, yield it, close it (also when start-up fails later).

    ``local``: vLLM's ``AsyncLLM`` in this process (the default). ``remote``: the vLLM
    OpenAI servers at ``settings.vllm_urls``; nothing of vLLM is imported here then.
    """
    engine: Engine
    if settings.engine == "remote":
        from server.engines.remote import RemoteEngine

        engine = await RemoteEngine.start(settings)
    else:
        from server.engines.local import LocalEngine

        engine = LocalEngine.start(settings)
    log.info("engine.started", kind=settings.engine, model=engine.model_name)
    try:
        yield engine
    finally:
        await engine.aclose()
