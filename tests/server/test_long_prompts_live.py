"""An agent harness's first request, as it is sent, on ``thinkgate serve`` with the
default model and context (no ``--max-model-len``: the testbed's 65,536): a prompt of
35,000 tokens with ``max_tokens`` 32,000 on the Messages API (past the room the prompt
leaves: Anthropic's rule runs it to the context's end) and on the Responses API, both
streamed through the real SDKs; the testbed's answers past its 512 trained tokens are
poor, so each stream is left once the answer has begun (which aborts it). Efforts are
still shares of the 512 tokens the testbed thinks within."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from conftest import LiveServer, start_server, stop_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPT_TOKENS = 35_000


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    log = Path(tmp_path_factory.mktemp("default-context")) / "server.log"
    # The default model and context; no reward or PRM engine (unused here, slow to start).
    flags = ("--reward-model", "none", "--prm-model", "none")
    server = start_server(log, flags, bare=True, default_context=True)
    try:
        yield server
    finally:
        stop_server(server)


def _long_text(claude: anthropic.Anthropic, model: str) -> str:
    """A user turn of about PROMPT_TOKENS tokens (counted by the server)."""
    unit = "3+4-1+2-5+6-2+1 "
    text = unit * (PROMPT_TOKENS // len(unit))
    counted = claude.messages.count_tokens(
        model=model, messages=[{"role": "user", "content": text}]
    )
    assert counted.input_tokens >= PROMPT_TOKENS * 0.98, counted
    return text


def test_a_harness_sized_first_request_is_answered(default_server: LiveServer) -> None:
    base = default_server.base_url
    info = httpx.get(f"{base}/v1/models/{default_server.model}", timeout=10).json()
    assert info["max_model_len"] == 65536
    claude = anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0)
    text = _long_text(claude, default_server.model)
    messages: Any = [{"role": "user", "content": text}]
    with claude.messages.stream(
        model=default_server.model, max_tokens=32_000, messages=messages, timeout=300
    ) as stream:
        events = iter(stream)
        start = next(e for e in events if e.type == "message_start")
        assert start.message.usage.input_tokens >= PROMPT_TOKENS * 0.98
        assert next(e for e in events if e.type == "content_block_delta")  # it answers
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    with client.responses.create(
        model=default_server.model, input=text, stream=True, store=False, timeout=300
    ) as responses:
        kinds = iter(e.type for e in responses)
        assert next(kinds) == "response.created"
        assert next(k for k in kinds if k.endswith(".delta"))
    # Both left early: nothing runs on to the context's end.
    deadline = time.monotonic() + 30
    while _in_flight(base) > 0:
        assert time.monotonic() < deadline, "a left stream still runs"
        time.sleep(0.2)


def _in_flight(base: str) -> float:
    for line in httpx.get(f"{base}/metrics", timeout=10).text.splitlines():
        if line.startswith("thinkgate_inflight_requests "):
            return float(line.split()[1])
    raise AssertionError("no thinkgate_inflight_requests gauge")


def test_efforts_are_shares_of_the_trained_context(default_server: LiveServer) -> None:
    client = openai.OpenAI(base_url=f"{default_server.base_url}/v1", api_key="unused")
    r = client.chat.completions.with_raw_response.create(
        model=default_server.model,
        messages=[{"role": "user", "content": "Compute 3+4 mod 10."}],
        reasoning_effort="low",
        extra_body={"strategy": "elastic"},
    )
    assert r.headers["X-Budget-Applied"].startswith("thinking=48")  # 3/32 of 512
