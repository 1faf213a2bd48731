"""thinkgate_stream_frame_wait_seconds: how long each streamed frame waits in the gateway
between the strategy's event and the socket write (the fast tier: a scripted engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.pipeline.streaming import FIRST_EVENT_WAIT_S

ANSWER = "3\n</think>\\boxed{3}"
NAME = "thinkgate_stream_frame_wait_seconds"


def _histogram(text: str) -> tuple[float, float]:
    """(observations, observations at or under 0.1 s) from /metrics."""
    values = {}
    for line in text.splitlines():
        if line.startswith(NAME):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values[f"{NAME}_count"], values[f'{NAME}_bucket{{le="0.1"}}']


async def test_each_streamed_frame_is_timed(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(testbed_tokens, ANSWER)

    async with scripted_app(handler) as app:
        body = {"model": app.model, "prompt": "1+2", "max_tokens": 16, "stream": True}
        got = await app.client.post("/v1/completions", json=body)
        assert got.status_code == 200 and got.text.endswith("data: [DONE]\n\n")
        count, fast = _histogram((await app.client.get("/metrics")).text)
    frames = got.text.count("data: {")
    # Frames queued together go in one send and are timed once: at least the last send.
    assert 1 <= count <= frames
    assert fast == count  # nothing waits 0.1 s in a scripted engine's stream


async def test_the_admitted_comment_is_not_timed_as_a_frame(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """A multi-sample strategy whose first event comes after the headers' wait opens with
    the gateway's own comment, which never sat in the queue: timing it from nothing would
    record the process's age."""

    async def handler(request: GenerateRequest) -> Sequence[Sample]:
        await asyncio.sleep(FIRST_EVENT_WAIT_S + 0.2)
        return samples_of(testbed_tokens, *[ANSWER] * request.sampling.n)

    async with scripted_app(handler) as app:
        body = {"model": app.model, "prompt": "1+2", "max_tokens": 16, "stream": True}
        headers = {"X-Strategy": "self-consistency", "X-Budget-Samples": "2"}
        got = await app.client.post("/v1/completions", json=body, headers=headers)
        assert got.status_code == 200
        assert got.text.startswith(': thinkgate.progress {"status":"admitted"')
        count, fast = _histogram((await app.client.get("/metrics")).text)
    assert count >= 1 and fast == count
