"""vLLM's own benchmark client (``vllm bench serve``'s request function, unmodified)
against the gateway over real HTTP, when the first token is late: every request must
count as a success. The client strips each network read, so an SSE comment that arrives
in a read of its own (the "admitted" comment a live stream used to open with after 1 s)
glued the next event onto it and lost the whole stream: 35 of 100 requests at once
"failed" in ``thinkgate bench overhead``. The app and uvicorn run in this process over a
scripted engine whose first token comes after the headers' wait."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from conftest import uvicorn_in_thread

from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.pipeline.streaming import FIRST_EVENT_WAIT_S
from server.settings import Settings

pytestmark = pytest.mark.vllm  # imports vLLM's benchmark client (no engine starts)

ANSWER = "3\n</think>\\boxed{3}"


@pytest.fixture
def late_first_token(tmp_path: Path, testbed_tokens: Any) -> Iterator[str]:
    async def handler(request: GenerateRequest) -> Sequence[Sample]:
        await asyncio.sleep(FIRST_EVENT_WAIT_S + 0.3)  # queued in the engine, say
        return samples_of(testbed_tokens, *[ANSWER] * request.sampling.n)

    # Paced steps: each token reaches the client in a network read of its own, as from a
    # real engine (all at once, the reads would hold several events and hide the bug).
    engine = ScriptedEngine(handler, tokens=testbed_tokens, model_name="testbed-base", step_s=0.02)
    settings = Settings(reward_model="none", prm_model="none", state_dir=str(tmp_path))
    config = uvicorn.Config(create_app(settings, engine=engine), log_level="warning")
    with uvicorn_in_thread(config) as port:
        yield f"http://127.0.0.1:{port}"


async def _bench(url: str, headers: dict[str, str] | None, requests: int) -> list[Any]:
    import aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput,
        async_request_openai_completions,
    )

    async with aiohttp.ClientSession() as session:
        inputs = [
            RequestFuncInput(
                prompt="Compute 1+2 mod 10.",
                api_url=f"{url}/v1/completions",
                prompt_len=8,
                output_len=16,
                model="testbed-base",
                extra_headers=headers,
            )
            for _ in range(requests)
        ]
        return list(
            await asyncio.gather(*(async_request_openai_completions(i, session) for i in inputs))
        )


@pytest.mark.parametrize(
    "headers",
    [None, {"X-Strategy": "plain"}, {"X-Strategy": "elastic", "X-Budget-Thinking": "8"}],
    ids=["default", "plain", "elastic"],
)
def test_every_request_succeeds_when_the_first_token_is_late(
    late_first_token: str, headers: dict[str, str] | None
) -> None:
    outputs = asyncio.run(_bench(late_first_token, headers, requests=4))
    assert [o.error for o in outputs] == [""] * 4
    assert all(o.success for o in outputs)
    for o in outputs:
        assert o.ttft > FIRST_EVENT_WAIT_S  # it really waited past the headers
        assert o.generated_text  # the tokens arrived after the wait
