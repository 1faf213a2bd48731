"""The remote engine's generation calls spread over small httpx pools
(engines/client_shards.py): least busy first, a new pool only when all are full."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import httpx

from engines.client_shards import ClientShards


def _make(made: list[httpx.AsyncClient]) -> httpx.AsyncClient:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    made.append(client)
    return client


async def test_calls_fill_a_shard_then_open_the_next_and_reuse_freed_ones() -> None:
    made: list[httpx.AsyncClient] = []
    shards = ClientShards(lambda: _make(made), per_shard=2, max_shards=3)
    async with AsyncExitStack() as stack:
        held = [await stack.enter_async_context(shards.client()) for _ in range(6)]
        # Least busy first: a second shard opens once the first holds two calls.
        assert [made.index(c) for c in held] == [0, 0, 1, 1, 2, 2]
        # Every shard full at the cap: the least busy (the first) takes one more.
        async with shards.client() as extra:
            assert made.index(extra) == 0 and shards.shards == 3
    async with shards.client() as again:  # all free: no new pool
        assert made.index(again) == 0 and shards.shards == 3
    await shards.aclose()
    assert all(c.is_closed for c in made) and shards.shards == 0


async def test_a_given_client_serves_every_call_and_stays_open() -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(204)))
    shards = ClientShards.single(client)

    async def call() -> int:
        async with shards.client() as c:
            assert c is client
            return (await c.get("http://x/")).status_code

    assert await asyncio.gather(*(call() for _ in range(20))) == [204] * 20
    assert shards.shards == 1
    await shards.aclose()
    assert not client.is_closed
    await client.aclose()
