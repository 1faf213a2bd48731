"""Start one of the gateway's in-process vLLM engines (the generator, the reward model,
the PRM): each needs the same two things around vLLM's own constructor, and an engine
started without either misbehaves in a way no test of that engine alone shows.

* the spin of vLLM's shared-memory ring (:func:`engines.local.engine_wait.export`), read
  by the engine processes at start-up: set after they start, it is never seen;
* the engine processes out of the gateway's process group
  (:func:`engines.local.process_group.detached_children`): a group SIGTERM from a
  supervisor then reaches the gateway alone, which drains before stopping them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from engines.local import engine_wait, process_group

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM


class _Closable(Protocol):
    async def aclose(self) -> None: ...


E = TypeVar("E", bound=_Closable)


async def start_in_thread(start: Callable[[], E]) -> E:
    """``start()`` (an engine's blocking start: its processes' imports, tens of seconds on
    a CPU) in a worker thread, so that the gateway's other engines can start beside it
    (the PRM's and the reward model's: ``server.resources.builders`` builds them side by side).
    Cancelled meanwhile (another one failed), it lets the start finish and closes the
    engine, instead of leaving its processes to outlive the start-up."""
    task = asyncio.ensure_future(asyncio.to_thread(start))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            engine = await task
        except Exception:
            raise asyncio.CancelledError from None
        await engine.aclose()
        raise


def start_async_llm(args: AsyncEngineArgs, *, spin_ms: float | None) -> AsyncLLM:
    """vLLM's ``AsyncLLM.from_engine_args(args)`` with the ring's spin exported and the
    engine processes in a group of their own."""
    from vllm.v1.engine.async_llm import AsyncLLM

    engine_wait.export(spin_ms)
    with process_group.detached_children():
        return AsyncLLM.from_engine_args(args)
