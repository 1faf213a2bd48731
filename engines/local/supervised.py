"""The local engine under a death policy (``--on-engine-death exit|restart``).

vLLM's engine core runs in its own process; when it dies (killed, out of memory) every
request in flight fails with ``EngineDeadError`` (a 503 for the client) and the engine
never serves again. ``SupervisedEngine`` notices within ``POLL_S``:

- ``exit``: calls ``on_exit`` (the lifecycle: answer what it can, exit status 4) so
  that systemd, Docker or Kubernetes start a fresh process;
- ``restart``: shuts the dead engine down and starts a new one in a worker thread
  (tens of seconds on CPU); meanwhile ``health`` raises a 503 with Retry-After, and
  ``/ready`` says 503 until the new engine serves.

Everything that holds the engine (strategies, PETS jobs, metrics) holds this wrapper,
so a restarted engine needs no rewiring.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Final, Literal

import structlog

from core.engine import EngineLoad, GenerateRequest, ModelTokens, Sample, SampleDelta
from core.errors import BackendUnavailable
from engines.local.engine import LocalEngine

log = structlog.get_logger("thinkgate.engine")

POLL_S: Final = 0.25
Policy = Literal["exit", "restart"]


class SupervisedEngine:
    def __init__(
        self,
        engine: LocalEngine,
        *,
        policy: Policy,
        start: Callable[[], LocalEngine],
        on_exit: Callable[[], None],
    ) -> None:
        self._engine = engine
        self._policy = policy
        self._start = start
        self._on_exit = on_exit
        self.model_name = engine.model_name
        self.tokens: ModelTokens = engine.tokens
        self.deaths = 0
        self.restarts = 0
        self._restarting = False
        self._watch: asyncio.Task[None] | None = None

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    @property
    def processors(self) -> frozenset[str]:
        return self._engine.processors

    def watch(self) -> None:
        """Start noticing deaths (call from the running event loop)."""
        if self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._run_watch())

    # --- Engine protocol: the current engine does the work

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        self._check()
        return await self._engine.generate(request)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[list[Sample]]:
        self._check()
        return await self._engine.generate_batch(requests)

    def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        # The engine's own generator, not a wrapper around it: no extra hop per token.
        self._check()
        return self._engine.stream(request)

    def load(self) -> EngineLoad | None:
        return None if self.restarting else self._engine.load()

    async def health(self) -> None:
        self._check()
        await self._engine.health()

    @property
    def restarting(self) -> bool:
        """A new engine is being started, or (restart policy) the engine has died and the
        watcher has not noticed yet: from the kill on, never "dead" for good."""
        return self._restarting or (self._policy == "restart" and self._engine.dead)

    def _check(self) -> None:
        if self.restarting:
            raise BackendUnavailable(
                "the engine died and is being restarted; retry shortly", retry_after_s=5
            )

    def num_unfinished(self) -> int:
        return 0 if self.restarting else self._engine.num_unfinished()

    @property
    def dead(self) -> bool:
        """Dead for good (the ``exit`` policy): ``/health`` says 503 so that a liveness
        probe replaces the process. Under ``restart`` a dead engine is ``restarting``."""
        return self._policy == "exit" and self._engine.dead

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        await self._engine.aclose()

    # --- the policy

    async def _run_watch(self) -> None:
        while True:
            await asyncio.sleep(POLL_S)
            if not self._engine.dead:
                continue
            self.deaths += 1
            log.error("engine.dead", policy=self._policy, deaths=self.deaths)
            if self._policy == "exit":
                self._on_exit()
                return
            await self._restart()

    async def _restart(self) -> None:
        self._restarting = True
        started = time.monotonic()
        dead = self._engine
        try:
            await dead.aclose()  # reaps what is left of the old engine's processes
        except Exception:
            log.exception("engine.close_failed")
        while True:
            try:
                self._engine = await asyncio.to_thread(self._start)
                break
            except Exception:
                # Keep answering 503 and try again: exiting here would lose the process
                # the operator chose to keep.
                log.exception("engine.restart_failed")
                await asyncio.sleep(5.0)
        self.restarts += 1
        self._restarting = False
        log.info("engine.restarted", seconds=round(time.monotonic() - started, 2))
