"""The remote engine against real vLLM servers: two ``thinkgate replica`` processes on
the testbed model, a gateway with ``--engine remote --vllm-urls A,B`` (``remote_stack``).

Per-server state, spreading, a client disconnect reaching the replica, and a replica
SIGKILLed under load (failover, ejection, re-admission). The API behaviour itself runs
in the modules marked ``engines("local", "remote")``.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest

if TYPE_CHECKING:
    from conftest import RemoteStack, Replica

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTION = "Compute 3+8-5+7 mod 10."
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"


def _ready(stack: RemoteStack) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{stack.gateway.base_url}/ready", timeout=10).json()
    return answer


def _servers(stack: RemoteStack) -> list[dict[str, Any]]:
    servers: list[dict[str, Any]] = _ready(stack).get("servers") or _ready_error(stack)
    return servers


def _server(stack: RemoteStack, replica: Replica) -> dict[str, Any]:
    return next(s for s in _servers(stack) if s["url"] == replica.url)


def _ready_error(stack: RemoteStack) -> list[dict[str, Any]]:
    servers: list[dict[str, Any]] = httpx.get(f"{stack.gateway.base_url}/ready", timeout=10).json()[
        "servers"
    ]
    return servers


def _wait(what: str, check: Any, timeout_s: float, step_s: float = 0.1) -> float:
    """Seconds until ``check()`` is true; fails after ``timeout_s``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"{what}: not within {timeout_s} s")
        time.sleep(step_s)
    return time.monotonic() - start


def _chat(model: str, content: str = QUESTION, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **extra}


def test_ready_and_metrics_list_every_server(remote_stack: RemoteStack) -> None:
    ready = _ready(remote_stack)
    assert ready["status"] == "ready"
    servers = {s["url"]: s for s in ready["servers"]}
    assert set(servers) == {r.url for r in remote_stack.replicas}
    for s in servers.values():
        assert s["state"] == "up" and s["protocol"] == "generate"
        # thinkgate replica loads all three processors (the testbed base ships a predictor).
        assert s["processors"] == ["confidence", "elastic", "guidance"]
    m = remote_stack.gateway.metrics()
    for r in remote_stack.replicas:
        assert m[f'thinkgate_upstream_up{{server="{r.url}"}}'] == 1.0
        assert m[f'thinkgate_upstream_state{{server="{r.url}",state="up"}}'] == 1.0


def test_a_vllm_servers_tokenizer_is_checked_over_its_tokenize_route(
    remote_stack: RemoteStack,
) -> None:
    """What ``--reward-url`` start-up compares (server.resources.model_match): the probe's ids
    under vLLM's own server and under the model directory agree, and differ from
    another tokenizer's."""
    import testbed
    from server.resources import model_match

    seen = model_match.remote_probe(remote_stack.replicas[0].url, timeout_s=30)
    assert seen is not None, "vLLM's server answered no /tokenize"
    ids, name = seen
    assert name  # the served model's name, for the start-up message
    assert ids == model_match.local_probe(testbed.model_path("base"))
    chars = model_match.probe_ids(lambda text: [ord(c) for c in text])
    assert not model_match.same_tokenizer(ids, chars)


def test_calls_spread_over_both_servers(remote_stack: RemoteStack) -> None:
    before = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=remote_stack.gateway.base_url, timeout=120) as c:
            bodies = [
                _chat(
                    remote_stack.gateway.model,
                    f"Compute {i}+{(i * 7) % 10}-3 mod 10.",
                    n=4,
                    temperature=1.0,
                    max_tokens=60,
                )
                for i in range(12)
            ]
            answers = await asyncio.gather(
                *(c.post("/v1/chat/completions", json=b) for b in bodies)
            )
        return [a.status_code for a in answers]

    assert asyncio.run(burst()) == [200] * 12
    after = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}
    grew = {url: after[url] - before[url] for url in after}
    assert sum(grew.values()) == 12
    assert all(g >= 2 for g in grew.values()), grew  # least outstanding samples spreads them


def test_a_follow_up_call_lands_where_its_prompt_is_cached(remote_stack: RemoteStack) -> None:
    """Elastic two-pass: the answer pass (prompt + thinking) goes where the thinking ran."""
    before = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}
    answer = httpx.post(
        f"{remote_stack.gateway.base_url}/v1/chat/completions",
        json=_chat(
            remote_stack.gateway.model,
            "Compute 1+2+3+4+5+6+7 mod 10.",
            elastic_mode="two-pass",
            temperature=0.0,
        ),
        headers={"X-Strategy": "elastic", "X-Budget-Thinking": "24", "X-Budget-Solution": "8"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["thinkgate"]["mode"] == "two-pass"
    after = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}
    grew = sorted(after[url] - before[url] for url in after)
    assert grew == [0, 2], grew  # both calls on one server


def _vllm_counts(stack: RemoteStack) -> dict[str, float]:
    """Prompt tokens and prefix-cache hits summed over the replicas' ``/metrics``, and the
    block size each reports (``vllm:cache_config_info``)."""
    out = {"prompt": 0.0, "hits": 0.0}
    for r in stack.replicas:
        text = r.metrics_text()
        counts = r.metrics(text)
        out["prompt"] += counts["vllm:prompt_tokens_total"]
        out["hits"] += counts["vllm:prefix_cache_hits_total"]
        block = re.search(r'^vllm:cache_config_info\{[^}]*block_size="(\d+)"', text, re.M)
        if block is not None:
            out[f"block {r.url}"] = float(block.group(1))
    return out


def test_a_step_search_reads_its_paths_from_the_replicas_prefix_cache(
    remote_stack: RemoteStack,
) -> None:
    """Every step resubmits each path whole: the replicas (``thinkgate replica`` on CPU:
    32-token blocks) compute only its tail. With vLLM's CPU default of 128-token blocks a
    testbed path (prompt and a few steps, under 128 tokens) would reuse nothing."""
    before = _vllm_counts(remote_stack)
    answer = httpx.post(
        f"{remote_stack.gateway.base_url}/v1/chat/completions",
        json=_chat(remote_stack.gateway.model, temperature=1.0, seed=3),
        headers={"X-Strategy": "beam-search", "X-Budget-Samples": "2"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["thinkgate"]["steps"] >= 3
    after = _vllm_counts(remote_stack)
    assert {k: v for k, v in after.items() if k.startswith("block")} == {
        f"block {r.url}": 32.0 for r in remote_stack.replicas
    }
    prompt, hits = after["prompt"] - before["prompt"], after["hits"] - before["hits"]
    assert hits > 0.4 * prompt, (hits, prompt)


def test_each_step_of_every_path_is_one_call_to_a_replica(remote_stack: RemoteStack) -> None:
    """An unseeded search sends a step of all its beams as one ``/v1/completions`` call
    with every beam's prompt (a replica counts one call, the search one engine request
    per distinct beam); the vLLM servers draw every sample billed."""
    before = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}
    generated = sum(_generated(r) for r in remote_stack.replicas)
    answer = httpx.post(
        f"{remote_stack.gateway.base_url}/v1/chat/completions",
        # Eight operations: the beams' lines differ, so a step has several paths.
        json=_chat(remote_stack.gateway.model, "Compute 3+8-5+7-2+9-4+6 mod 10.", temperature=1.0),
        headers={"X-Strategy": "beam-search", "X-Budget-Samples": "4"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    info = body["thinkgate"]
    after = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}
    calls = sum(after[u] - before[u] for u in after)
    # A step is one call, and so are the answers (when a path needs one after its
    # thinking); never a call per path.
    assert info["steps"] <= calls <= info["steps"] + 1, (calls, info)
    assert calls < info["engine_requests"], (calls, info)
    billed = body["usage"]["completion_tokens"]
    _wait(
        "vLLM's counters to show every billed token",
        lambda: sum(_generated(r) for r in remote_stack.replicas) - generated == billed,
        10,
    )


def test_pets_offline_rounds_spread_over_the_servers(remote_stack: RemoteStack) -> None:
    base = remote_stack.gateway.base_url
    before = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}
    jsonl = "\n".join(
        orjson.dumps(
            {
                "custom_id": f"q{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"messages": [{"role": "user", "content": c}]},
            }
        ).decode()
        for i, c in enumerate(f"Compute {i}+{i + 3}-2 mod 10." for i in range(6))
    )
    job = httpx.post(
        f"{base}/v1/pets/batches",
        params={"total_budget": 24, "cap": 6, "round_size": 6, "seed": 3},
        content=jsonl,
        headers={"Content-Type": "application/jsonl"},
        timeout=30,
    ).json()
    _wait(
        "batch done",
        lambda: httpx.get(f"{base}/v1/pets/batches/{job['id']}").json()["status"] != "in_progress",
        300,
        0.5,
    )
    assert httpx.get(f"{base}/v1/pets/batches/{job['id']}").json()["status"] == "completed"
    after = {r.url: _server(remote_stack, r)["requests"] for r in remote_stack.replicas}
    assert all(after[u] > before[u] for u in after), (before, after)


def _running(replica: Replica) -> float:
    m: dict[str, float] = replica.metrics()
    return m.get(RUNNING, 0.0) + m.get(WAITING, 0.0)


def _generated(replica: Replica) -> float:
    """vLLM's own count of tokens it generated (frontend aborts are not in its
    finished-request counters, so the abort shows as tokens never generated)."""
    text = httpx.get(f"{replica.url}/metrics", timeout=10).text
    return sum(
        float(line.rpartition(" ")[2])
        for line in text.splitlines()
        if line.startswith("vllm:generation_tokens_total")
    )


def test_disconnect_aborts_the_request_on_the_replica(remote_stack: RemoteStack) -> None:
    """The client leaves mid-stream: the replica aborts and stops generating for it.

    "In the engine" is known from the stream's first bytes, not from polling /metrics
    (a short request can finish between two polls on a loaded box)."""
    base = remote_stack.gateway.base_url
    host, port = base.removeprefix("http://").split(":")
    before = sum(_generated(r) for r in remote_stack.replicas)
    payload = orjson.dumps(
        _chat(
            remote_stack.gateway.model,
            n=8,
            max_tokens=460,
            ignore_eos=True,
            temperature=1.0,
            stream=True,
        )
    )
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head + payload)
        seen = b""
        while b"data: {" not in seen:  # tokens are flowing: the replica is generating
            data = sock.recv(4096)
            assert data, "the stream ended before its first tokens"
            seen += data
    # The socket is closed: the gateway cancels, closes its upstream call, vLLM aborts.
    _wait("replicas idle again", lambda: all(_running(r) == 0 for r in remote_stack.replicas), 15)
    generated = sum(_generated(r) for r in remote_stack.replicas) - before
    # Run to the end it would have generated 8 x 460 tokens.
    assert 0 < generated < 8 * 460 / 2, generated
    assert all(s["outstanding_requests"] == 0 for s in _ready(remote_stack)["servers"])


async def _one(client: httpx.AsyncClient, body: dict[str, Any], stream: bool) -> str:
    """'ok', or 'error <status>' for an enveloped 5xx (a stream's error frame counts)."""
    if not stream:
        answer = await client.post("/v1/chat/completions", json=body)
        if answer.status_code == 200:
            return "ok"
        assert answer.status_code >= 500, answer.text
        assert set(answer.json()["error"]) >= {"message", "type", "code"}
        return f"error {answer.status_code}"
    async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        frames = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    assert frames[-1] in ("data: [DONE]",) or '"error"' in frames[-1], frames[-1]
    errors = [f for f in frames if f.startswith('data: {"error"')]
    return "error stream" if errors else "ok"


# Requests in flight when a replica is killed: enough that both replicas hold several
# (each replica batches all it is given), few enough that the survivor ends them quickly.
LOAD = 32


def test_killing_a_replica_under_load_loses_nothing(replicas_back: RemoteStack) -> None:
    """SIGKILL one of two replicas with 32 requests in flight over both: every request
    ends (200, or a 5xx in the error envelope), new requests go to the survivor, and the
    killed server is re-admitted when it comes back."""
    remote_stack = replicas_back
    gw = remote_stack.gateway
    victim, survivor = remote_stack.replicas
    timeout_s = 120.0
    # A test before may have left a replica ejected or not yet re-admitted: the load
    # below is meant for two servers the gateway places calls on.
    _wait("both replicas up", lambda: all(s["state"] == "up" for s in _servers(remote_stack)), 30)

    async def load() -> tuple[list[str], float]:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=timeout_s) as client:
            bodies = [
                _chat(
                    gw.model,
                    f"Compute {i % 10}+{(3 * i) % 10}+{(7 * i) % 10} mod 10.",
                    max_tokens=200,
                    ignore_eos=True,
                    temperature=1.0,
                )
                for i in range(LOAD)
            ]
            tasks = [
                asyncio.create_task(_one(client, b, stream=i % 2 == 1))
                for i, b in enumerate(bodies)
            ]
            # Kill once the gateway has calls open on both servers, by its own count: a
            # call it has sent and not yet had back. vLLM's running gauge is sampled, and
            # at the end of a 30-minute tier it once missed the whole load.
            deadline = time.monotonic() + 60
            while not all(s["outstanding_requests"] > 0 for s in _servers(remote_stack)):
                servers = _servers(remote_stack)
                assert time.monotonic() < deadline, f"load never reached both: {servers}"
                await asyncio.sleep(0.05)
            started = time.monotonic()
            await asyncio.to_thread(victim.kill)
            outcomes = await asyncio.wait_for(asyncio.gather(*tasks), timeout_s + 30)
            return list(outcomes), time.monotonic() - started

    outcomes, _ = asyncio.run(load())
    assert len(outcomes) == LOAD
    # A non-streamed request has shown the client nothing: placed again, never lost.
    assert outcomes[0::2] == ["ok"] * (LOAD // 2), outcomes
    assert outcomes.count("ok") >= LOAD // 2, outcomes
    killed_at = time.monotonic()

    # Ejected within 2 s (a refused connection or the health check), and new requests
    # are served by the survivor alone.
    ejected_in = _wait("victim ejected", lambda: _server(remote_stack, victim)["state"] != "up", 2)
    calls_before = _server(remote_stack, survivor)["requests"]
    fresh = [
        httpx.post(
            f"{gw.base_url}/v1/chat/completions", json=_chat(gw.model, max_tokens=30), timeout=60
        ).status_code
        for _ in range(4)
    ]
    assert fresh == [200] * 4
    assert _server(remote_stack, survivor)["requests"] - calls_before == 4
    assert time.monotonic() - killed_at < 60
    print(
        f"outcomes: {sorted(set(outcomes))}, ok {outcomes.count('ok')}/{LOAD}, "
        f"ejected after {ejected_in:.2f} s"
    )

    # Back on the same port: verified and re-admitted by the health checks.
    victim.start()
    victim.wait_ready()
    _wait("victim re-admitted", lambda: _server(remote_stack, victim)["state"] == "up", 20)
    before = _server(remote_stack, victim)["requests"]

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=120) as c:
            answers = await asyncio.gather(
                *(
                    c.post(
                        "/v1/chat/completions",
                        json=_chat(
                            gw.model, f"Compute {i}+1 mod 10.", n=4, temperature=1.0, max_tokens=40
                        ),
                    )
                    for i in range(8)
                )
            )
        return [a.status_code for a in answers]

    assert asyncio.run(burst()) == [200] * 8
    assert _server(remote_stack, victim)["requests"] > before


def test_a_replica_stopped_with_sigterm_under_load_loses_nothing(
    replicas_back: RemoteStack,
) -> None:
    """The rolling-update case: SIGTERM to one replica's process group (what a supervisor
    sends) with 30 requests in flight over both, half of them streams the client reads
    live. ``thinkgate replica`` starts vLLM with ``--shutdown-timeout``: its engine finishes
    what it runs while its server takes no new connection, and the gateway places new
    calls on the other replica. Every request is answered in full."""
    remote_stack = replicas_back
    gw = remote_stack.gateway
    victim = remote_stack.replicas[1]

    async def load() -> list[str]:
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=180) as client:
            bodies = [
                _chat(
                    gw.model,
                    f"Compute {i % 10}+{(3 * i) % 10}+{(7 * i) % 10} mod 10.",
                    max_tokens=200,
                    ignore_eos=True,
                    temperature=1.0,
                    **({"strategy": "self-consistency", "budget": {"samples": 2}} if i % 4 else {}),
                )
                for i in range(30)
            ]
            tasks = [
                asyncio.create_task(_one(client, b, stream=i % 2 == 1))
                for i, b in enumerate(bodies)
            ]
            deadline = time.monotonic() + 60
            while _running(victim) < 1:
                assert time.monotonic() < deadline, "load never reached the victim"
                await asyncio.sleep(0.05)
            await asyncio.to_thread(victim.stop)  # SIGTERM to its group, waits for the exit
            return list(await asyncio.gather(*tasks))

    outcomes = asyncio.run(load())
    assert outcomes == ["ok"] * 30, outcomes
    victim.start()
    victim.wait_ready()
    _wait("victim re-admitted", lambda: _server(remote_stack, victim)["state"] == "up", 20)
