"""Admission over real HTTP: a full server refuses at once (429 + Retry-After) without
parsing the body, and the connection stays usable. The gateway's own app and uvicorn
(our protocol) in this process, over a scripted engine that holds the one slot."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from conftest import uvicorn_in_thread

from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.process.http_timeouts import header_timeout_protocol
from server.settings import Settings

CHAT = {"model": "testbed-base", "messages": [{"role": "user", "content": "Compute 1+2 mod 10."}]}


class Held:
    """A handler that holds each engine call until released (from the test's thread)."""

    def __init__(self, tokens: Any) -> None:
        self.tokens = tokens
        self.entered = threading.Event()
        self.release = threading.Event()

    async def __call__(self, request: GenerateRequest) -> Sequence[Sample]:
        self.entered.set()
        await asyncio.to_thread(self.release.wait, 30)
        return samples_of(self.tokens, "3\n</think>\\boxed{3}")


@pytest.fixture(params=["httptools", "h11"])
def server(
    request: pytest.FixtureRequest, tmp_path: Path, testbed_tokens: Any
) -> Iterator[tuple[str, Held]]:
    held = Held(testbed_tokens)
    engine = ScriptedEngine(held, tokens=testbed_tokens, model_name="testbed-base")
    settings = Settings(
        reward_model="none",
        prm_model="none",
        state_dir=str(tmp_path),
        max_inflight_requests=1,
        retry_after_s=2,
    )
    config = uvicorn.Config(
        create_app(settings, engine=engine),
        log_level="warning",
        http=header_timeout_protocol(10, http=request.param),
    )
    with uvicorn_in_thread(config) as port:
        try:
            yield f"http://127.0.0.1:{port}", held
        finally:
            held.release.set()  # before the server stops: it waits for the held request


def test_a_full_server_refuses_before_parsing_the_body(server: tuple[str, Held]) -> None:
    url, held = server
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=url, timeout=30) as client:
        first = pool.submit(httpx.post, f"{url}/v1/chat/completions", json=CHAT, timeout=30)
        assert held.entered.wait(30), "the first request never reached the engine"
        # Not even valid JSON: the 429 comes before it is parsed (was a 400).
        refused = client.post(
            "/v1/chat/completions",
            content=b"{" + b"x" * 100_000,
            headers={"content-type": "application/json"},
        )
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "2"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        held.release.set()
        assert first.result().status_code == 200
        # The same client goes on: the unread body did not become the next request.
        again = client.post("/v1/chat/completions", json=CHAT)
        assert again.status_code == 200, again.text
        assert again.json()["choices"][0]["message"]["content"] == "\\boxed{3}"
        metrics = client.get("/metrics").text
        assert "thinkgate_rejected_requests_total 1.0" in metrics
