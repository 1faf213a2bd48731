"""The Responses API's WebSocket mode through the real ``openai`` SDK
(``client.responses.connect()``) on the app of ``thinkgate serve`` under uvicorn on
loopback (a scripted engine): a turn's stream events arrive as on the SSE stream, a second
turn continues the first with ``previous_response_id`` on the same socket, a refused turn
is an ``error`` event and the socket serves the next; the handshake is refused without a
key, with another key's tenant kept apart, and from a page on another origin."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest
import uvicorn
from conftest import uvicorn_in_thread

from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.settings import Settings

KEY = "tg-socket"


async def _events(conn: Any) -> list[Any]:
    """One turn's events, up to its last (``response.completed``, or an error)."""
    out = []
    async for event in conn:
        out.append(event)
        if event.type in ("response.completed", "response.failed", "error"):
            return out
    return out


def test_a_socket_serves_turns_as_the_stream_does(tmp_path: Path, testbed_tokens: Any) -> None:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(testbed_tokens, *["3+4=7\n</think>\\boxed{7}"] * request.sampling.n)

    engine = ScriptedEngine(handler, tokens=testbed_tokens, model_name="testbed-base")
    settings = Settings(
        reward_model="none", prm_model="none", state_dir=str(tmp_path), api_keys=(KEY,)
    )
    config = uvicorn.Config(create_app(settings, engine=engine), log_level="warning")
    with uvicorn_in_thread(config) as port:
        asyncio.run(_turns(f"http://127.0.0.1:{port}/v1"))


async def _turns(base_url: str) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    async with client.responses.connect(max_retries=0) as conn:
        await conn.send({"type": "response.create", "model": "testbed-base", "input": "3+4?"})
        first = await _events(conn)
        kinds = [e.type for e in first]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert "response.output_text.delta" in kinds
        done = first[-1].response
        assert "\\boxed{7}" in done.output_text
        await conn.send(
            {
                "type": "response.create",
                "model": "testbed-base",
                "input": "And 1+1?",
                "previous_response_id": done.id,
            }
        )
        second = await _events(conn)
        assert second[-1].type == "response.completed"
        assert second[-1].response.previous_response_id == done.id
        await conn.send(
            {"type": "response.create", "model": "testbed-base", "input": "x", "temperature": 9}
        )
        refused = await _events(conn)
        assert refused[-1].type == "error" and refused[-1].error.param == "temperature"
        await conn.send({"type": "response.create", "model": "testbed-base", "input": "2+2?"})
        assert (await _events(conn))[-1].type == "response.completed"  # still serving
    stranger = openai.AsyncOpenAI(base_url=base_url, api_key="tg-wrong", max_retries=0)
    with pytest.raises(Exception) as refused_key:
        async with stranger.responses.connect(max_retries=0) as conn:
            await conn.send({"type": "response.create", "model": "testbed-base", "input": "?"})
            await _events(conn)
    assert "403" in str(refused_key.value) or "rejected" in str(refused_key.value).lower()
    page = {"Origin": "https://evil.example"}
    with pytest.raises(Exception) as cross:
        async with client.responses.connect(max_retries=0, extra_headers=page) as conn:
            await conn.send({"type": "response.create", "model": "testbed-base", "input": "?"})
            await _events(conn)
    assert "403" in str(cross.value) or "rejected" in str(cross.value).lower()
