"""Tenants on a live gateway over real vLLM servers (the remote stack's replicas): one
tenant's flood of self-consistency requests leaves another tenant's plain requests
answered (no 429s); the flood gets only 200s and 429s with Retry-After; each tenant is
billed exactly its responses' usage; and nothing secret reaches the log (no key, no
prompt or answer text), whatever the request's fate."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REMOTE_FLAGS, LiveServer, RemoteStack

from server.tenancy.tenants import hashed

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

KEYS = {"flood": "tg-flood-KEYMARK-7f3a", "plain": "tg-plain-KEYMARK-91c2"}
PROMPT_MARK = "9*8*7*6*5*4*3*2"  # in the testbed vocabulary: a decoded prompt keeps it
CAP = 16  # the gateway's samples in flight: the flood's share beside the plain tenant is 8


@pytest.fixture(scope="module")
def gateway(
    remote_stack: RemoteStack,
    start_gateway_for_module: Callable[..., LiveServer],
    tmp_path_factory: pytest.TempPathFactory,
) -> LiveServer:
    path = tmp_path_factory.mktemp("tenants-live") / "keys.toml"
    path.write_text("".join(f'[tenants.{t}]\nkeys = ["{hashed(k)}"]\n\n' for t, k in KEYS.items()))
    urls = ",".join(r.url for r in remote_stack.replicas)
    return start_gateway_for_module(
        *REMOTE_FLAGS,
        *("--vllm-urls", urls, "--reward-model", "none", "--prm-model", "none"),
        *("--keys-file", str(path), "--max-inflight-samples", str(CAP)),
        api_key=KEYS["plain"],
    )


def billed(server: LiveServer, tenant: str) -> float:
    return server.metrics().get(
        f'thinkgate_tenant_tokens_total{{kind="completion",tenant="{tenant}"}}', 0.0
    )


async def _post(
    client: httpx.AsyncClient, server: LiveServer, tenant: str, **extra: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEYS[tenant]}", **extra.pop("headers", {})}
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": "Compute 3+4*2 mod 10."}],
        "max_tokens": 48,
        **extra,
    }
    return await client.post("/v1/chat/completions", json=body, headers=headers)


def test_a_flood_leaves_another_tenants_plain_requests_answered(gateway: LiveServer) -> None:
    before = {t: billed(gateway, t) for t in KEYS}

    async def run() -> tuple[list[httpx.Response], list[httpx.Response]]:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=300) as client:
            sc = {"X-Strategy": "self-consistency", "X-Budget-Samples": "8"}
            done = asyncio.Event()
            flood: list[asyncio.Future[httpx.Response]] = []

            async def keep_flooding() -> None:  # open loop: 8 samples every 50 ms
                while not done.is_set():
                    flood.append(asyncio.ensure_future(_post(client, gateway, "flood", headers=sc)))
                    await asyncio.sleep(0.05)

            flooding = asyncio.ensure_future(keep_flooding())
            await asyncio.sleep(0.5)  # the flood holds the server when the plain ones come
            plain = [await _post(client, gateway, "plain") for _ in range(3)]
            done.set()
            await flooding
            return list(await asyncio.gather(*flood)), plain

    flood, plain = asyncio.run(run())
    assert [r.status_code for r in plain] == [200, 200, 200], [r.text for r in plain]
    statuses = {r.status_code for r in flood}
    # Both: the server was contended all along, and the flood still got its share.
    assert statuses == {200, 429}, [r.text for r in flood]
    for r in flood:
        if r.status_code == 429:
            assert int(r.headers["Retry-After"]) >= 1
            assert r.json()["error"]["type"] == "rate_limit_error"
    for tenant, responses in (("flood", flood), ("plain", plain)):
        usage = sum(r.json()["usage"]["completion_tokens"] for r in responses if r.is_success)
        assert billed(gateway, tenant) - before[tenant] == usage
    m = gateway.metrics()
    assert m['thinkgate_tenant_inflight_samples{tenant="flood"}'] == 0
    assert m['thinkgate_tenant_reserved_tokens{tenant="flood"}'] == 0


def test_nothing_secret_reaches_the_log(gateway: LiveServer) -> None:
    async def run() -> list[int]:
        async with httpx.AsyncClient(base_url=gateway.base_url, timeout=300) as client:
            mark = [{"role": "user", "content": f"Compute {PROMPT_MARK} mod 10."}]
            sent = [
                await _post(client, gateway, "plain", messages=mark),
                await _post(client, gateway, "plain", messages=mark, stream=True),
                await _post(client, gateway, "plain", messages=mark, max_tokens=10**6),  # 400
                await _post(client, gateway, "plain", messages=mark, temperature="hot"),  # 400
            ]
            wrong = {"Authorization": f"Bearer {KEYS['plain']}-WRONG"}
            sent.append(await client.post("/v1/chat/completions", json={}, headers=wrong))
            return [r.status_code for r in sent]

    assert asyncio.run(run()) == [200, 200, 400, 400, 401]
    log = Path(gateway.log_path).read_text(errors="replace")
    assert "KEYMARK" not in log and PROMPT_MARK not in log
    assert "request.content" not in log  # prompts and answers: only with --log-content
    assert '"tenant": "plain"' in log  # the access log names the tenant, not the key


def test_a_request_whose_client_left_gives_back_its_samples_and_reservation(
    gateway: LiveServer,
) -> None:
    before = billed(gateway, "flood")
    gateway.post_and_leave(
        "/v1/chat/completions",
        {
            "model": gateway.model,
            "messages": [{"role": "user", "content": "Compute 3+4*2-7*5 mod 10."}],
            "max_tokens": 256,
            "ignore_eos": True,  # seconds of work: a short answer could beat the leave
        },
        headers={
            "Authorization": f"Bearer {KEYS['flood']}",
            "X-Strategy": "self-consistency",
            "X-Budget-Samples": "8",
            "X-Budget-Tokens": "1500",  # metered: what it generated is billed
        },
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = gateway.metrics()
        if (
            m['thinkgate_tenant_inflight_samples{tenant="flood"}'] == 0
            and m['thinkgate_tenant_reserved_tokens{tenant="flood"}'] == 0
        ):
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the left request still holds its tenant's room: {m}")
    assert 0 <= billed(gateway, "flood") - before <= 1500
