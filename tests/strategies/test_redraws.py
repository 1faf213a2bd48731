"""Samples lost with their server mid-way and drawn again (``SampleDelta.redrawn``), over
HTTP with a scripted engine that loses the first tokens of every unseen sample: the
strategy sees only the fresh draw, usage bills the lost tokens too, the ``thinkgate``
object counts the redraws, and a stream the client watches is never redrawn. The same
with real vLLM servers killed under load: test_router_stack.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of

QUESTION = [{"role": "user", "content": "Compute 3+4 mod 10."}]
TEXT = "3+4=7\n</think>\\boxed{7}"
LOST = 3


@pytest.mark.parametrize(
    ("strategy", "extra"),
    [
        ("self-consistency", {}),
        ("deepconf", {}),
        ("elastic", {"budget": {"thinking": 64}}),
    ],
)
async def test_lost_samples_are_redrawn_and_billed(
    scripted_app: Any, testbed_tokens: Any, strategy: str, extra: dict[str, Any]
) -> None:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        drawn = samples_of(testbed_tokens, *[TEXT] * request.sampling.n)
        if not request.sampling.top_logprobs:
            return drawn
        return [replace(s, confidences=(9.0,) * len(s.token_ids)) for s in drawn]  # DeepConf

    processors = frozenset({"elastic", "confidence"})
    async with scripted_app(handler, processors=processors) as app:
        app.engine.lose_tokens = LOST
        body = {"model": app.model, "messages": QUESTION, "strategy": strategy, **extra}
        if strategy != "elastic":
            body["budget"] = {"samples": 4}
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        data = r.json()
        info = data["thinkgate"]
        drawn = sum(c.sampling.n for c in app.engine.calls)
        assert info["redrawn_samples"] == drawn
        assert info["redrawn_lost_tokens"] == LOST * drawn
        fresh = len(samples_of(testbed_tokens, TEXT)[0].token_ids) * drawn
        assert data["usage"]["completion_tokens"] == fresh + LOST * drawn
        assert "\\boxed{7}" in data["choices"][0]["message"]["content"]


async def test_a_watched_stream_is_not_redrawn(scripted_app: Any, testbed_tokens: Any) -> None:
    """Streamed elastic: the client sees tokens as they come, so its engine stream is
    ``visible`` and the scripted engine loses nothing (no redraw field, exact usage)."""

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(testbed_tokens, *[TEXT] * request.sampling.n)

    async with scripted_app(handler, processors=frozenset({"elastic"})) as app:
        app.engine.lose_tokens = LOST
        body = {
            "model": app.model,
            "messages": QUESTION,
            "strategy": "elastic",
            "budget": {"thinking": 64},
            "stream": True,
        }
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200 and "redrawn" not in r.text
        assert all(c.visible for c in app.engine.calls)
