"""The remote engine in front of a vLLM server without thinkgate's processors, spoken to
over the OpenAI routes only (``/v1/completions`` with token ids and ``vllm_xargs``), and
a gateway that refuses a server serving another model.

The server is a real ``thinkgate replica --processors ""``: vLLM's own server with no
processor of ours, serving the testbed model under another name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import (
    STARTUP_TIMEOUT_S,
    LiveServer,
    RemoteStack,
    Replica,
    _log_dir,
    launch_replicas,
    launch_server,
    stop_server,
    wait_server,
)

from testbed.task import make_questions

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
OTHER_NAME = "testbed-base-plain"
HARD = make_questions("test", 3, seed=41, min_ops=9, max_ops=12)


@pytest.fixture(scope="module")
def bare_stack() -> Iterator[tuple[Replica, LiveServer]]:
    """The replica and its gateway, launched together: the gateway's start (mostly one
    core's imports) overlaps the replica's, and it admits the replica once that answers
    (within ``--remote-start-timeout-s``, the suite's own start-up limit here)."""
    (replica,) = launch_replicas(
        _log_dir(), 1, "--processors", "", "--served-model-name", OTHER_NAME
    )
    gateway = None
    try:
        gateway = launch_server(
            _log_dir() / "gateway-bare.log",
            (
                *("--engine", "remote", "--vllm-urls", replica.url),
                *("--remote-protocol", "completions"),
                *("--remote-start-timeout-s", f"{STARTUP_TIMEOUT_S:g}"),
            ),
        )
        replica.wait_ready()
        yield replica, wait_server(gateway)
    finally:
        if gateway is not None:
            stop_server(gateway)
        replica.stop()


@pytest.fixture(scope="module")
def bare_replica(bare_stack: tuple[Replica, LiveServer]) -> Replica:
    return bare_stack[0]


@pytest.fixture(scope="module")
def bare_gateway(bare_stack: tuple[Replica, LiveServer]) -> LiveServer:
    return bare_stack[1]


@pytest.fixture(scope="module")
def client(bare_gateway: LiveServer) -> Any:
    return openai.OpenAI(base_url=f"{bare_gateway.base_url}/v1", api_key="x", max_retries=0)


def test_ready_says_what_the_server_lacks(bare_gateway: LiveServer, bare_replica: Replica) -> None:
    (server,) = httpx.get(f"{bare_gateway.base_url}/ready", timeout=10).json()["servers"]
    assert server["url"] == bare_replica.url and server["state"] == "up"
    assert server["protocol"] == "completions" and server["processors"] == []


def test_elastic_honours_both_budgets_with_two_calls(client: Any, hf_tokenizer: Any) -> None:
    t, s = 12, 6
    for q in HARD:
        raw = client.chat.completions.with_raw_response.create(
            model="testbed-base",
            messages=[{"role": "user", "content": q.prompt}],
            extra_headers={"X-Budget-Thinking": str(t), "X-Budget-Solution": str(s)},
            n=2,
            temperature=1.0,
        )
        reply = raw.parse()
        tg = reply.model_extra["thinkgate"]
        assert tg["strategy"] == "elastic" and tg["mode"] == "two-pass"
        for choice in reply.choices:
            info = choice.model_extra["thinkgate"]
            assert info["thinking_tokens"] <= t and info["answer_tokens"] <= s
            thinking = choice.message.model_extra["reasoning_content"] or ""
            assert len(hf_tokenizer.encode(thinking, add_special_tokens=False)) <= t
        assert reply.usage.completion_tokens_details.reasoning_tokens <= 2 * t


def test_streaming_and_samples_over_the_completions_route(client: Any) -> None:
    stream = client.chat.completions.create(
        model="testbed-base",
        messages=[{"role": "user", "content": HARD[0].prompt}],
        stream=True,
        n=2,
        temperature=1.0,
        max_tokens=40,
    )
    seen: dict[int, str] = {}
    finished: set[int] = set()
    for chunk in stream:
        for c in chunk.choices:
            seen[c.index] = seen.get(c.index, "") + (
                (c.delta.model_extra or {}).get("reasoning_content") or c.delta.content or ""
            )
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1} and all(seen.values())
    sc = client.chat.completions.with_raw_response.create(
        model="testbed-base",
        messages=[{"role": "user", "content": HARD[1].prompt}],
        extra_headers={"X-Budget-Samples": "6"},
    ).parse()
    assert sc.model_extra["thinkgate"]["strategy"] == "self-consistency"
    assert sc.model_extra["thinkgate"]["samples"] == 6


def test_budget_guidance_is_a_503_without_the_processor(client: Any) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model="testbed-base",
            messages=[{"role": "user", "content": HARD[0].prompt}],
            extra_headers={"X-Strategy": "budget-guidance", "X-Budget-Thinking": "32"},
        )
    assert info.value.status_code == 503
    assert "budget guidance is not available" in info.value.message


def test_a_gateway_refuses_a_server_serving_another_model(
    remote_stack: RemoteStack, bare_replica: Replica, tmp_path: Path
) -> None:
    urls = f"{remote_stack.replicas[0].url},{bare_replica.url}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--port",
            "0",
            "--engine",
            "remote",
            "--vllm-urls",
            urls,
            "--remote-protocol",
            "completions",
            "--remote-start-timeout-s",
            "30",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert bare_replica.url in out and OTHER_NAME in out, out[-2000:]


def test_bad_engine_settings_are_refused_before_anything_starts() -> None:
    for flags, expected in (
        (["--engine", "remote"], "needs vllm_urls"),
        (["--engine", "remote", "--vllm-urls", "localhost:8000"], "not an http(s)://host:port URL"),
        (["--engine", "remote", "--vllm-urls", "http://a:1,http://a:1"], "twice"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "server.cli", "serve", *flags],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and expected in done.stderr, done.stderr[-1000:]
