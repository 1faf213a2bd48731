"""Failover rules of the remote engine, fast: servers scripted with ``httpx.MockTransport``
(what each URL answers is decided per test). The same rules against real vLLM servers,
killed for real, are in test_remote_engine.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import httpx
import orjson
import pytest

from core import errors as tree
from core.engine import GenerateRequest, SamplingConfig
from engines.remote.engine import RemoteEngine
from engines.remote.upstream import ServerFacts
from server.settings import RemoteEngineSettings

A, B = "http://a:1", "http://b:1"
FACTS = ServerFacts(
    model_id="m", max_model_len=64, protocol="generate", processors=frozenset({"elastic"})
)


class Tokens:
    think_start_ids: tuple[int, ...] = (3,)
    think_end_ids: tuple[int, ...] = (4,)
    think_start_id: int | None = 3
    think_end_id: int | None = 4
    eos_token_ids: tuple[int, ...] = (2,)
    vocab_size: int = 8

    def decode(self, token_ids: Sequence[int]) -> str:
        return ""

    def encode(self, text: str) -> list[int]:
        return [5]

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id])

    def render_chat(self, messages: Sequence[Mapping[str, object]]) -> list[int]:
        return [5]


def engine(
    handler: Callable[[httpx.Request], httpx.Response], urls: tuple[str, ...] = (A, B)
) -> RemoteEngine:
    settings = RemoteEngineSettings(
        urls=urls, protocol="auto", connect_timeout_s=1, start_timeout_s=1, health_interval_s=1
    )
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    eng = RemoteEngine(settings, model_name="m", tokens=Tokens(), probe="p", client=client)
    for up in eng.upstreams:
        up.state, up.facts = "up", FACTS
    eng._reference = FACTS
    return eng


def request(n: int = 1, **extra: int | float | str) -> GenerateRequest:
    return GenerateRequest(
        request_id="r",
        prompt_token_ids=tuple(range(10, 30)),
        sampling=SamplingConfig(n=n, max_tokens=4, extra_args=extra),
    )


def answer(r: httpx.Request | None = None) -> httpx.Response:
    """A finished answer with as many samples as the request asked for."""
    n = orjson.loads(r.content)["sampling_params"].get("n", 1) if r is not None else 1
    choices = [{"index": i, "token_ids": [7, 2], "finish_reason": "stop"} for i in range(n)]
    return httpx.Response(200, json={"choices": choices})


def host(r: httpx.Request) -> str:
    return f"http://{r.url.host}:1"


async def test_a_refused_connection_is_retried_on_the_other_server_and_ejects() -> None:
    seen: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append(host(r))
        if host(r) == A:
            raise httpx.ConnectError("refused", request=r)
        return answer(r)

    eng = engine(handler)
    out = await eng.generate(request(n=2))
    assert [s.token_ids for s in out] == [(7, 2), (7, 2)]
    assert seen == [A, B]  # A first (list order on a tie), then B
    assert eng.upstreams[0].state == "down" and eng.upstreams[0].failures == 1
    assert eng.upstreams[0].outstanding_samples == 0 == eng.upstreams[1].outstanding_samples
    assert await eng.generate(request()) and seen[-1] == B  # A is out
    await eng.aclose()


async def test_a_500_is_retried_elsewhere_then_after_a_pause_then_reported_as_a_502() -> None:
    calls: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(host(r))
        return httpx.Response(500, json={"error": {"message": "engine exploded"}})

    eng = engine(handler)
    with pytest.raises(tree.UpstreamError, match="engine exploded") as info:
        await eng.generate(request())
    assert info.value.status == 502  # the upstream's fault, said so
    assert len(calls) == 4 and set(calls[:2]) == {A, B}  # 1 + remote_retries (3)
    assert all(u.state == "up" for u in eng.upstreams)  # a 500 is the call's, not the server's
    await eng.aclose()


async def test_a_client_error_is_not_retried() -> None:
    calls: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(host(r))
        return httpx.Response(400, json={"error": {"message": "n must be 1 when greedy"}})

    eng = engine(handler)
    with pytest.raises(tree.InvalidRequest, match="greedy"):
        await eng.generate(request())
    assert len(calls) == 1
    await eng.aclose()


async def test_a_call_needing_a_processor_only_goes_where_it_is_loaded() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        return answer(r) if host(r) == B else httpx.Response(599)

    eng = engine(handler)
    eng.upstreams[0].facts = ServerFacts(
        model_id="m", max_model_len=64, protocol="generate", processors=frozenset()
    )
    assert eng.processors == frozenset()  # what every admitted server has
    for _ in range(3):
        await eng.generate(request(thinkgate_thinking_budget=3))
    assert (eng.upstreams[0].requests, eng.upstreams[1].requests) == (0, 3)
    eng.upstreams[1].state = "down"
    with pytest.raises(tree.BackendUnavailable, match="elastic processor"):
        await eng.generate(request(thinkgate_thinking_budget=3))
    await eng.aclose()


def sse(*frames: object, done: bool = True) -> bytes:
    out = b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames)
    return out + (b"data: [DONE]\n\n" if done else b"")


async def test_a_stream_failing_before_its_first_token_moves_to_the_other_server() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        if host(r) == A:
            return httpx.Response(503, json={"error": {"message": "engine dead"}})
        frame = {"choices": [{"index": 0, "token_ids": [7, 2], "finish_reason": "stop"}]}
        return httpx.Response(200, content=sse(frame))

    eng = engine(handler)
    deltas = [d async for d in eng.stream(request())]
    assert [(d.token_ids, d.finish_reason) for d in deltas] == [((7, 2), "stop")]
    assert eng.upstreams[0].state == "down"  # vLLM's 503 is a dead engine
    await eng.aclose()


async def test_a_stream_cut_after_tokens_went_out_is_an_error_not_a_retry() -> None:
    calls: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(host(r))
        frame = {"choices": [{"index": 0, "token_ids": [7], "finish_reason": None}]}
        return httpx.Response(200, content=sse(frame, done=False))  # ends unfinished

    eng = engine(handler)
    got = []
    with pytest.raises(tree.UpstreamError, match="cannot be taken back"):
        async for d in eng.stream(request()):
            got.append(d)
    assert len(got) == 1 and len(calls) == 1
    await eng.aclose()


async def test_an_unseen_pool_cut_mid_way_draws_its_unfinished_samples_again_elsewhere() -> None:
    """Sample 0 finished and sample 1 half drawn when A drops the stream: the pool keeps
    sample 0, is told that 1 and 2 are drawn again (with the tokens lost), and gets them
    from B, whose call asks for exactly those two."""
    bodies: list[tuple[str, dict[str, object]]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        bodies.append((host(r), orjson.loads(r.content)))
        if len(bodies) == 1:
            frames = [
                {"choices": [{"index": 0, "token_ids": [7, 8, 2], "finish_reason": "stop"}]},
                {"choices": [{"index": 1, "token_ids": [9, 9], "finish_reason": None}]},
            ]
            return httpx.Response(200, content=sse(*frames, done=False))
        n = bodies[-1][1]["sampling_params"]["n"]  # type: ignore[index]
        frames = [
            {"choices": [{"index": j, "token_ids": [6, 2], "finish_reason": "stop"}]}
            for j in range(int(n))  # type: ignore[call-overload]
        ]
        return httpx.Response(200, content=sse(*frames))

    eng = engine(handler)
    unseen = replace(request(n=3), visible=False)
    deltas = [d async for d in eng.stream(unseen)]
    assert [b[0] for b in bodies] == [A, B]  # the redraw avoids the server that failed
    assert bodies[1][1]["sampling_params"]["n"] == 2  # type: ignore[index]
    assert [(d.index, d.lost_tokens) for d in deltas if d.redrawn] == [(1, 2), (2, 0)]
    finished = {d.index: d.token_ids for d in deltas if d.finish_reason}
    assert finished == {0: (7, 8, 2), 1: (6, 2), 2: (6, 2)}
    assert eng.redraws == 2
    await eng.aclose()


async def test_the_sole_route_is_never_ejected_and_is_retried_through_itself() -> None:
    """One URL (a router): a refused or dropped call is placed again through it after a
    pause (the router places it again, by a fresh session key so that a key-hashing
    policy does not send it back to the replica that failed); the route stays up."""
    calls: list[str] = []
    keys: list[str | None] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(host(r))
        keys.append(r.headers.get("x-session-id"))
        if len(calls) < 3:
            raise httpx.ConnectError("refused", request=r)
        return answer(r)

    eng = engine(handler, urls=(A,))
    got = await eng.generate(replace(request(), affinity="req-1"))
    assert [s.token_ids for s in got] == [(7, 2)] and calls == [A, A, A]
    assert keys == ["req-1", "req-1-retry1", "req-1-retry2"]
    assert eng.upstreams[0].state == "up" and eng.upstreams[0].failures == 2
    await eng.aclose()


async def test_the_sole_route_follows_what_a_router_publishes() -> None:
    """Its health is the router's /readiness (not /health, which a router turns 503 when
    any one worker is down); back from down, a verification that fails on the way (the
    router places /v1/models on a dead worker) keeps the facts it had."""
    ready = {"now": True}
    paths: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        paths.append(r.url.path)
        if r.url.path == "/readiness":
            return httpx.Response(200 if ready["now"] else 503)
        if r.url.path == "/health":
            return httpx.Response(503)  # one worker of the fleet is dead
        return httpx.Response(500, json={"error": {"message": "worker gone"}})

    eng = engine(handler, urls=(A,))
    up = eng.upstreams[0]
    await eng._check(up)
    assert up.state == "up" and up.health_path == "/readiness" and "/health" not in paths
    ready["now"] = False
    await eng._check(up)
    assert up.state == "down"
    with pytest.raises(tree.BackendUnavailable):
        await eng.health()
    ready["now"] = True
    await eng._check(up)
    assert up.state == "up" and up.facts == FACTS
    await eng.aclose()


async def test_no_server_up_is_a_503_naming_their_states() -> None:
    eng = engine(answer)
    for up in eng.upstreams:
        up.state = "down"
    with pytest.raises(tree.BackendUnavailable, match="no vLLM server is up"):
        await eng.health()
    with pytest.raises(tree.BackendUnavailable):
        await eng.generate(request())
    await eng.aclose()


async def test_odd_answers_keep_a_server_out_and_health_checks_running() -> None:
    """A server answering what no vLLM server sends (a proxy's page) stays down with the
    reason; the watcher keeps going and admits it once it answers properly."""
    proper = {"on": False}

    def handler(r: httpx.Request) -> httpx.Response:
        path = r.url.path
        if not proper["on"]:
            return httpx.Response(200, json={"data": [{"no_id": 1}]})  # malformed /v1/models
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 64}]})
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": [5]})
        if path == "/health":
            return httpx.Response(200)
        return answer(r)

    eng = engine(handler)
    eng.upstreams[0].state = "down"
    eng._settings = RemoteEngineSettings(
        urls=(A, B),
        protocol="generate",
        connect_timeout_s=1,
        start_timeout_s=1,
        health_interval_s=0.01,
    )
    await eng._admit(eng.upstreams[0])
    assert eng.upstreams[0].state == "down"
    assert "unexpected answer: KeyError" in (eng.upstreams[0].last_error or "")
    watcher = asyncio.create_task(eng._watch())
    proper["on"] = True

    def state() -> str:
        return eng.upstreams[0].state

    for _ in range(200):
        if state() == "up":
            break
        await asyncio.sleep(0.01)
    assert state() == "up" and eng.upstreams[0].facts is not None
    assert eng.upstreams[0].facts.processors == frozenset()  # probes were served: none loaded
    watcher.cancel()
    await eng.aclose()


async def test_a_connection_breaking_as_it_opens_is_a_transport_failure() -> None:
    """httpcore's anyio backend can raise AttributeError for a socket the peer closed as
    the connection opened (a replica SIGKILLed under load): placed again, not a 500."""
    calls: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        calls.append(host(r))
        if host(r) == A:
            raise AttributeError("'NoneType' object has no attribute 'getpeername'")
        return answer(r)

    eng = engine(handler)
    eng.upstreams[1].outstanding_samples = 99  # A first
    got = await eng.generate(request())
    assert calls == [A, B] and [s.token_ids for s in got] == [(7, 2)]
    assert eng.upstreams[0].state == "down"  # a broken connection ejects, as any
    await eng.aclose()
