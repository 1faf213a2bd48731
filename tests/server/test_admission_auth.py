"""Admission control (429 + Retry-After, fair shares between tenants, bounded waits)
and API keys (401)."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import Request

from core.base import Result, Usage
from core.errors import Overloaded, Unauthorized
from server.process.metrics import Metrics
from server.settings import Settings
from server.tenancy.admission import Admission
from server.tenancy.auth import authorize
from server.tenancy.tenants import Keyring, Tenant, TenantLimits

A = Tenant(name="a")
B = Tenant(name="b")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _result(completion: int, prompt: int = 5) -> Result:
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion, reasoning_tokens=0)
    return Result(choices=(), usage=usage, samples=1)


async def test_admission_caps_requests_and_samples() -> None:
    metrics = Metrics()
    adm = Admission(max_requests=2, max_samples=5, retry_after_s=3, metrics=metrics)
    a = await adm.acquire(A, 4)
    with pytest.raises(Overloaded) as info:
        await adm.acquire(A, 2)  # 6 samples > 5
    assert info.value.retry_after_s == 3 and info.value.status == 429
    assert info.value.code == "overloaded"
    b = await adm.acquire(A, 1)
    with pytest.raises(Overloaded):
        await adm.acquire(A, 0)  # 3 requests > 2
    a.release()
    a.release()  # idempotent
    assert (adm.requests, adm.samples) == (1, 1)
    b.release()
    assert (adm.requests, adm.samples) == (0, 0)
    text = metrics.render()
    assert b"thinkgate_rejected_requests_total 2.0" in text
    assert b'thinkgate_tenant_rejections_total{reason="busy",tenant="a"} 2.0' in text


async def test_a_flood_is_held_to_its_share_while_another_tenant_is_active() -> None:
    clock = Clock()
    adm = Admission(
        max_requests=100, max_samples=64, retry_after_s=1, metrics=Metrics(), clock=clock
    )
    alone = [await adm.acquire(A, 32), await adm.acquire(A, 32)]  # alone: all of it
    with pytest.raises(Overloaded):
        await adm.acquire(A, 1)
    for slot in alone:
        slot.release()
    b = await adm.acquire(B, 1)  # B active: A's share is half
    held = await adm.acquire(A, 32)
    with pytest.raises(Overloaded) as info:
        await adm.acquire(A, 1)  # 33 > 32, though 31 samples are free
    assert "tenant 'a' holds 1" in info.value.message
    b2 = await adm.acquire(B, 1)  # B's plain requests still get in at once
    b.release()
    b2.release()
    clock.now += 6  # B idle past fair_idle_s: A may take the rest
    extra = await adm.acquire(A, 32)
    held.release()
    extra.release()


async def test_a_weight_buys_a_larger_share() -> None:
    adm = Admission(max_requests=100, max_samples=60, retry_after_s=1, metrics=Metrics())
    heavy = Tenant(name="heavy", weight=2)
    b = await adm.acquire(B, 1)
    slots = [await adm.acquire(heavy, 10) for _ in range(4)]  # 40 = 2/3 of 60
    with pytest.raises(Overloaded):
        await adm.acquire(heavy, 1)
    for s in [*slots, b]:
        s.release()


async def test_a_tenant_within_its_share_waits_for_room_a_borrower_frees() -> None:
    adm = Admission(max_requests=100, max_samples=64, retry_after_s=1, metrics=Metrics(), wait_s=5)
    flood = [await adm.acquire(A, 32), await adm.acquire(A, 32)]  # A alone took it all
    waiting = asyncio.ensure_future(adm.acquire(B, 1))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    with pytest.raises(Overloaded):
        await adm.acquire(A, 1)  # A is over its share now that B waits: refused at once
    flood[0].release()  # the room goes to B, not to A's next request
    slot = await asyncio.wait_for(waiting, 1)
    assert adm.accounts["b"].samples == 1
    slot.release()
    flood[1].release()
    assert (adm.requests, adm.samples) == (0, 0)


async def test_a_wait_that_runs_out_is_a_429_and_holds_nothing() -> None:
    adm = Admission(
        max_requests=100, max_samples=4, retry_after_s=2, metrics=Metrics(), wait_s=0.05
    )
    held = await adm.acquire(A, 4)
    with pytest.raises(Overloaded) as info:
        await adm.acquire(B, 1)
    assert info.value.retry_after_s == 2
    cancelled = asyncio.ensure_future(adm.acquire(B, 1))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    held.release()
    assert (adm.requests, adm.samples) == (0, 0)
    assert adm.accounts["b"].waiting == 0


async def test_requests_per_minute_retry_after_comes_from_the_window() -> None:
    clock = Clock()
    tenant = Tenant(name="t", limits=TenantLimits(requests_per_minute=2))
    adm = Admission(
        max_requests=10, max_samples=10, retry_after_s=1, metrics=Metrics(), clock=clock
    )
    (await adm.acquire(tenant, 1)).release()
    clock.now += 20
    (await adm.acquire(tenant, 1)).release()  # just under: the second in the minute
    clock.now += 5
    with pytest.raises(Overloaded) as info:
        await adm.acquire(tenant, 1)  # just over
    assert info.value.code == "rate_limit_exceeded"
    assert info.value.retry_after_s == 35  # the first one leaves the window at +60
    with pytest.raises(Overloaded):
        adm.check_room(tenant)  # refused before its body is even parsed
    clock.now += 35
    (await adm.acquire(tenant, 1)).release()


async def test_tokens_are_reserved_at_admission_and_settled_to_usage() -> None:
    clock = Clock()
    metrics = Metrics()
    tenant = Tenant(name="t", limits=TenantLimits(tokens_per_minute=1000))
    adm = Admission(max_requests=10, max_samples=10, retry_after_s=1, metrics=metrics, clock=clock)
    first = await adm.acquire(tenant, 1, reserve=600)
    with pytest.raises(Overloaded) as info:
        await adm.acquire(tenant, 1, reserve=500)  # 600 reserved + 500 > 1000
    assert info.value.retry_after_s == 1  # only a request in flight holds it: the default
    second = await adm.acquire(tenant, 1, reserve=400)  # just fits
    first.release(_result(100))  # settled: 100 spent, 500 of its reservation freed
    clock.now += 10
    third = await adm.acquire(tenant, 1, reserve=500)  # 100 + 400 + 500
    second.release(_result(400))
    third.release(_result(500))
    assert adm.accounts["t"].window.reserved == 0
    with pytest.raises(Overloaded) as info:
        await adm.acquire(tenant, 1, reserve=100)  # 1000 spent in the minute
    assert info.value.retry_after_s == 50  # the first 100 leave at +60 from its end
    # A request whose worst case exceeds the whole minute runs once the minute is empty.
    clock.now += 61
    big = await adm.acquire(tenant, 1, reserve=5000)
    assert adm.accounts["t"].window.reserved == 1000
    big.release(_result(1200))
    billed = metrics.render().decode()
    assert 'thinkgate_tenant_tokens_total{kind="completion",tenant="t"} 2200.0' in billed
    assert 'thinkgate_tenant_reserved_tokens{tenant="t"} 0.0' in billed


async def test_no_drift_after_a_thousand_requests_some_aborted() -> None:
    clock = Clock()
    metrics = Metrics()
    tenant = Tenant(name="t", limits=TenantLimits(tokens_per_minute=10**9, max_inflight_samples=50))
    adm = Admission(
        max_requests=40, max_samples=100, retry_after_s=1, metrics=metrics, clock=clock, wait_s=1
    )
    billed = 0
    held = []
    for i in range(1000):
        slot = await adm.acquire(tenant, 1 + i % 3, reserve=50 + i % 7)
        if i % 5 == 0:  # aborted: no result, billed what it was seen to generate
            slot.spent = lambda i=i: i % 11
            billed += i % 11
            held.append((slot, None))
        else:
            held.append((slot, _result(i % 13)))
            billed += i % 13
        if len(held) > 10:
            s, r = held.pop(0)
            s.release(r)
        clock.now += 0.01
    for s, r in held:
        s.release(r)
    acct = adm.accounts["t"]
    assert (adm.requests, adm.samples, acct.requests, acct.samples) == (0, 0, 0, 0)
    assert acct.window.reserved == 0
    text = metrics.render().decode()
    assert f'thinkgate_tenant_tokens_total{{kind="completion",tenant="t"}} {float(billed)}' in text


async def test_samples_in_flight_per_tenant() -> None:
    tenant = Tenant(name="t", limits=TenantLimits(max_inflight_samples=8))
    adm = Admission(max_requests=10, max_samples=100, retry_after_s=4, metrics=Metrics())
    slot = await adm.acquire(tenant, 8)  # just under (at) the limit
    with pytest.raises(Overloaded) as info:
        await adm.acquire(tenant, 1)  # just over
    assert info.value.code == "rate_limit_exceeded" and info.value.retry_after_s == 4
    other = await adm.acquire(B, 8)  # another tenant is not held by it
    slot.release()
    other.release()


def _request(auth: str | None) -> Request:
    headers = [] if auth is None else [(b"authorization", auth.encode())]
    return Request({"type": "http", "method": "POST", "path": "/v1/models", "headers": headers})


def test_no_keys_configured_lets_everyone_in() -> None:
    assert authorize(_request(None), Keyring()).name == "anonymous"


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer wrong", "Basic sekrit", "sekrit"])
def test_bad_or_missing_key_is_401(auth: str | None) -> None:
    with pytest.raises(Unauthorized) as info:
        authorize(_request(auth), Keyring(plain=("sekrit", "other")))
    assert info.value.status == 401


def test_any_configured_key_works_each_its_own_tenant() -> None:
    # comma-separated, as from THINKGATE_API_KEYS
    settings = Settings.model_validate({"api_keys": "sekrit,other"})
    assert settings.api_keys == ("sekrit", "other")
    keys = Keyring(plain=settings.api_keys)
    one = authorize(_request("Bearer other"), keys)
    two = authorize(_request("bearer  sekrit"), keys)
    assert one.name.startswith("key-") and two.name.startswith("key-") and one != two


def test_the_default_share_base_is_what_the_engine_batches() -> None:
    """Unset, the samples that fair shares divide are the engine's rows (so a tenant's
    half is half of what runs, not of a queue behind it), at least one request's sample
    budget, at most the server's cap."""
    from core.engine import EngineLoad
    from server.app import share_cap

    class Rows:
        def __init__(self, rows: int | None) -> None:
            self.rows = rows

        def load(self) -> EngineLoad | None:
            return None if self.rows is None else EngineLoad(rows=self.rows, busy=0)

    def cap(settings: Settings, rows: int | None) -> int:
        return share_cap(settings, Rows(rows))  # type: ignore[arg-type]

    assert cap(Settings(), None) == 64  # the local engine's max_num_seqs
    assert cap(Settings(max_num_seqs=128), None) == 128
    assert cap(Settings(), 256) == 256  # what the engine says it runs
    assert cap(Settings(max_num_seqs=8), None) == 64  # at least max_samples
    assert cap(Settings(fair_share_samples=32), 256) == 32
    assert cap(Settings(max_inflight_samples=48), 256) == 48
    remote = Settings(engine="remote", vllm_urls=("http://a:1", "http://b:1"))
    assert cap(remote, None) == 128  # 64 rows each


async def test_a_tenant_alone_holds_the_cap_and_shares_the_rows_beside_another() -> None:
    adm = Admission(
        max_requests=100, max_samples=1024, retry_after_s=1, metrics=Metrics(), share_samples=64
    )
    alone = [await adm.acquire(A, 32) for _ in range(6)]  # 192 samples: A alone, past 64
    b = await adm.acquire(B, 4)  # B arrives: its first request fits
    with pytest.raises(Overloaded):
        await adm.acquire(A, 1)  # A is past its half of the rows now: refused at once
    for slot in alone:
        slot.release()
    again = await adm.acquire(A, 28)  # within 32, beside B
    with pytest.raises(Overloaded):
        await adm.acquire(A, 8)  # 36 > 32
    for slot in (again, b):
        slot.release()
