"""httpx clients side by side for calls made many at once (the remote engine's generation,
the PRM server's scoring).

httpcore 1.0's pool walks every connection it holds whenever a request starts or ends,
counting idle connections once per idle connection (quadratic) and polling each idle
socket (encode/httpcore#1035, unmerged in 1.0.9). With many connections kept alive the
walk outgrows the request: one pool keeping 64 alive took 4.2 ms of client CPU per call
at 32 calls in flight and 11.7 ms at 64, against 1.5 and 1.2 ms through these shards
(``thinkgate bench client-pools``: benchmarks/results/client-pools.md); behind
``--engine remote``, particle filtering at 16 questions in flight spent about half of the
gateway's busy samples in that walk (py-spy). So a shard takes at most ``per_shard``
calls at once and keeps as many alive: a call goes to the least busy shard, and a new
shard opens when every shard is full.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import httpx

PER_SHARD: Final = 8  # requests at once per pool: well under the walk's knee (16-32)
MAX_SHARDS: Final = 64  # beyond 512 calls in flight the least busy shard takes more


def pooled_client(timeout: httpx.Timeout) -> httpx.AsyncClient:
    """One shard's client: connections unbounded (the gateway's admission control bounds
    the calls; a pool must not queue behind it), ``PER_SHARD`` kept alive."""
    return httpx.AsyncClient(
        timeout=timeout,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=PER_SHARD),
    )


class ClientShards:
    """Pools of at most ``per_shard`` calls each, opened on demand."""

    def __init__(
        self,
        make: Callable[[], httpx.AsyncClient],
        *,
        per_shard: int = PER_SHARD,
        max_shards: int = MAX_SHARDS,
        owned: bool = True,
    ) -> None:
        self._make = make
        self._owned = owned  # closed by aclose
        self._per_shard = per_shard
        self._max_shards = max_shards
        self._clients: list[httpx.AsyncClient] = []
        self._busy: list[int] = []

    @classmethod
    def with_timeout(cls, timeout: httpx.Timeout) -> ClientShards:
        """Shards of ``pooled_client``, opened on demand."""
        return cls(lambda: pooled_client(timeout))

    @classmethod
    def single(cls, client: httpx.AsyncClient) -> ClientShards:
        """One given client for every call (tests with a mock transport); not closed here."""
        return cls(lambda: client, max_shards=1, owned=False)

    @property
    def shards(self) -> int:
        return len(self._clients)

    @asynccontextmanager
    async def client(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client for one call, counted busy until the block ends."""
        i = self._pick()
        self._busy[i] += 1
        try:
            yield self._clients[i]
        finally:
            self._busy[i] -= 1

    def _pick(self) -> int:
        if self._busy:
            i = min(range(len(self._busy)), key=self._busy.__getitem__)
            if self._busy[i] < self._per_shard or len(self._clients) >= self._max_shards:
                return i
        self._clients.append(self._make())
        self._busy.append(0)
        return len(self._clients) - 1

    async def aclose(self) -> None:
        clients, self._clients, self._busy = self._clients, [], []
        if self._owned:
            for c in clients:
                await c.aclose()
