"""The engine a gateway runs on, picked by settings (``--engine local|remote``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import structlog

from core.engine import Engine
from engines.settings import EngineSettings

if TYPE_CHECKING:
    from engines.tokens import TokenizerTokens

log = structlog.get_logger("thinkgate.engine")


@asynccontextmanager
async def open_engine(
    settings: EngineSettings,
    *,
    on_exit: Callable[[], None] | None = None,
    tokens: TokenizerTokens | None = None,
) -> AsyncIterator[Engine]:
    """Start the configured engine, yield it, close it (also when start-up fails later).

    ``local``: vLLM's ``AsyncLLM`` in this process (the default), supervised by the
    ``on_engine_death`` policy (``on_exit`` is how the ``exit`` policy stops the process).
    ``remote``: the vLLM OpenAI servers at ``settings.vllm_urls`` (their failures are the
    remote engine's failover); nothing of vLLM is imported here then.

    The local engine starts in a worker thread (its processes' imports and its load take
    tens of seconds on a CPU): the loop stays free for what starts beside it (the
    resources, ``server.app``). ``tokens``: the served model's tokenizer, where the
    caller has loaded it already.
    """
    engine: Engine
    if settings.engine == "remote":
        from engines.remote.engine import RemoteEngine

        engine = await RemoteEngine.start(settings)
    else:
        from engines.local.engine import LocalEngine
        from engines.local.launch import start_in_thread
        from engines.local.supervised import SupervisedEngine

        first = await start_in_thread(lambda: LocalEngine.start(settings, tokens=tokens))
        supervised = SupervisedEngine(
            first,
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
