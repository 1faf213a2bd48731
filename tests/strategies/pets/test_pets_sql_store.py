"""The PETS batch store, on SQLite and on PostgreSQL: what goes in comes back (also after
reopening), and leases keep two gateways from writing to one job."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import pytest_asyncio

from core.base import JSON
from core.engine import Sample, SamplingConfig
from server.batches.pets import sql_store
from server.batches.pets.input import BatchOptions, BatchQuestion
from server.batches.pets.sql_store import SqlBatchStore
from server.batches.pets.store import JobRecord, StoredSample

LEASE_S = 10.0


class Clock:
    """Wall clock under the test's control."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


QUESTIONS = [
    BatchQuestion(
        custom_id="a",
        prompt_token_ids=(1, 2, 3, 70_000),
        thinking_open=True,
        sampling=SamplingConfig(temperature=0.5, max_tokens=64, seed=7, stop=("x",)),
    ),
    BatchQuestion(
        custom_id="b",
        prompt_token_ids=(4,),
        thinking_open=False,
        sampling=SamplingConfig(top_p=0.9, extra_args={"k": 1}),
    ),
]
OPTIONS = BatchOptions(total_budget=9, cap=4, round_size=2, seed=3)


def record(job_id: str = "pbatch_1", *, model: str = "m", created_at: int = 100) -> JobRecord:
    return JobRecord(
        id=job_id,
        model=model,
        status="in_progress",
        options=OPTIONS,
        n_questions=len(QUESTIONS),
        created_at=created_at,
    )


def stored(q: int, round_: int, *ids: int, index: int = 0) -> StoredSample:
    sample = Sample(
        index=index, token_ids=ids, finish_reason="stop", cumulative_logprob=-1.5, stop_reason=2
    )
    return StoredSample(question=q, round=round_, sample=sample)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest_asyncio.fixture(loop_scope="function")  # the tests' own loop
async def store(store_target: str, clock: Clock) -> AsyncIterator[SqlBatchStore]:
    s = SqlBatchStore(store_target, clock=clock)
    yield s
    await s.aclose()


async def test_a_job_round_trips_and_survives_reopening(store_target: str, clock: Clock) -> None:
    path = store_target
    store = SqlBatchStore(path, clock=clock)
    await store.create(record(), QUESTIONS, owner="A", lease_s=LEASE_S)
    text = Sample(index=1, token_ids=(9, 9), finish_reason="length", stop_reason="</s>")
    assert await store.add_samples("pbatch_1", "A", [stored(0, 0, 5, 6), stored(1, 0, 7)])
    assert await store.add_samples(
        "pbatch_1", "A", [StoredSample(question=0, round=1, sample=text)]
    )
    output: list[dict[str, JSON]] = [{"custom_id": "a", "n": 1}, {"custom_id": "b", "n": None}]
    done = await store.finish("pbatch_1", "A", status="completed", completed_at=200, output=output)
    assert done
    await store.aclose()

    again = SqlBatchStore(path, clock=clock)  # a restarted gateway
    job = await again.job("pbatch_1")
    assert job is not None
    assert (job.status, job.completed_at, job.owner, job.options) == (
        "completed",
        200,
        None,
        OPTIONS,
    )
    assert (job.samples_drawn, job.questions_sampled, job.rounds) == (3, 2, 2)
    assert await again.questions("pbatch_1") == QUESTIONS
    samples = await again.samples("pbatch_1")
    assert [(s.question, s.round, s.sample.token_ids) for s in samples] == [
        (0, 0, (5, 6)),
        (1, 0, (7,)),
        (0, 1, (9, 9)),
    ]
    assert samples[0].sample == Sample(
        index=0, token_ids=(5, 6), finish_reason="stop", cumulative_logprob=-1.5, stop_reason=2
    )
    assert samples[2].sample == text
    assert await again.output("pbatch_1") == output
    assert await again.job("pbatch_nope") is None
    await again.aclose()


async def test_listing_is_newest_first_with_a_cursor(store: SqlBatchStore) -> None:
    for i in range(5):
        await store.create(record(f"j{i}", created_at=100 + i), QUESTIONS, owner="A", lease_s=1)
    await store.finish("j1", None, status="cancelled", completed_at=1)
    assert [j.id for j in await store.jobs()] == ["j4", "j3", "j2", "j1", "j0"]
    assert [j.id for j in await store.jobs(after="j3", limit=2)] == ["j2", "j1"]
    assert [j.id for j in await store.jobs(status="in_progress", after="j2")] == ["j0"]


async def test_a_held_lease_keeps_others_out_until_it_expires(
    store: SqlBatchStore, clock: Clock
) -> None:
    await store.create(record(), QUESTIONS, owner="A", lease_s=LEASE_S)
    assert await store.claim("B", model="m", lease_s=LEASE_S, limit=5) == []
    clock.now += LEASE_S / 2
    assert await store.renew("pbatch_1", "A", lease_s=LEASE_S)  # A is alive: renewed
    clock.now += LEASE_S * 0.9
    assert await store.claim("B", model="m", lease_s=LEASE_S, limit=5) == []
    assert not await store.renew("pbatch_1", "B", lease_s=LEASE_S)  # not B's to renew

    clock.now += LEASE_S  # A died: nobody renewed
    assert await store.claim("B", model="m", lease_s=LEASE_S, limit=5) == ["pbatch_1"]
    job = await store.job("pbatch_1")
    assert job is not None and (job.owner, job.resumed) == ("B", 1)
    # A, back from a stall, may no longer write anything.
    assert not await store.renew("pbatch_1", "A", lease_s=LEASE_S)
    assert not await store.add_samples("pbatch_1", "A", [stored(0, 0, 1)])
    assert not await store.finish("pbatch_1", "A", status="failed", completed_at=1)
    assert await store.add_samples("pbatch_1", "B", [stored(0, 0, 1)])
    job = await store.job("pbatch_1")
    assert job is not None and (job.status, job.samples_drawn) == ("in_progress", 1)


async def test_two_gateways_cannot_both_claim_a_job(store: SqlBatchStore, clock: Clock) -> None:
    await store.create(record(), QUESTIONS, owner="A", lease_s=LEASE_S)
    clock.now += LEASE_S + 1
    first = await store.claim("B", model="m", lease_s=LEASE_S, limit=5)
    second = await store.claim("C", model="m", lease_s=LEASE_S, limit=5)
    assert (first, second) == (["pbatch_1"], [])


async def test_claims_take_only_the_served_model_and_respect_the_limit(
    store: SqlBatchStore, clock: Clock
) -> None:
    await store.create(record("other", model="m2"), QUESTIONS, owner="A", lease_s=1)
    for i in range(3):
        await store.create(record(f"j{i}", created_at=100 + i), QUESTIONS, owner="A", lease_s=1)
    clock.now += 2
    assert await store.claim("B", model="m", lease_s=LEASE_S, limit=2) == ["j0", "j1"]
    assert await store.claim("B", model="m", lease_s=LEASE_S, limit=2) == ["j2"]
    other = await store.job("other")
    assert other is not None and other.owner == "A"


async def test_a_released_job_is_claimable_at_once(store: SqlBatchStore) -> None:
    await store.create(record(), QUESTIONS, owner="A", lease_s=LEASE_S)
    await store.release("pbatch_1", "B")  # not B's: nothing happens
    assert await store.claim("B", model="m", lease_s=LEASE_S, limit=1) == []
    await store.release("pbatch_1", "A")
    assert await store.claim("B", model="m", lease_s=LEASE_S, limit=1) == ["pbatch_1"]


async def test_cancel_by_anyone_ends_the_holders_writes(store: SqlBatchStore) -> None:
    await store.create(record(), QUESTIONS, owner="A", lease_s=LEASE_S)
    assert await store.finish("pbatch_1", None, status="cancelled", completed_at=5)
    assert not await store.finish("pbatch_1", None, status="cancelled", completed_at=6)
    assert not await store.add_samples("pbatch_1", "A", [stored(0, 0, 1)])
    assert not await store.renew("pbatch_1", "A", lease_s=LEASE_S)
    job = await store.job("pbatch_1")
    assert job is not None and (job.status, job.completed_at, job.samples_drawn) == (
        "cancelled",
        5,
        0,
    )
    assert await store.output("pbatch_1") == []


async def test_a_file_of_another_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 99")
    with pytest.raises(RuntimeError, match="schema 99"):
        SqlBatchStore(path)


async def test_a_version_1_file_is_renamed_in_place_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite3"
    v1 = sql_store._SCHEMA.replace("tg_pets_", "").format(blob="BLOB", serial="INTEGER")
    with sqlite3.connect(path) as db:  # the tables as version 1 named them
        db.executescript(v1)
        db.execute(
            "INSERT INTO jobs (id, model, status, options, n_questions, created_at)"
            " VALUES ('pbatch_old', 'm', 'completed', ?, 2, 5)",
            (json.dumps(asdict(OPTIONS)),),
        )
        db.execute("PRAGMA user_version = 1")
    store = SqlBatchStore(path)
    job = await store.job("pbatch_old")
    await store.aclose()
    assert job is not None and (job.status, job.options) == ("completed", OPTIONS)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2


async def test_jobs_list_by_tenant_with_the_jobs_from_before_tenants(
    store: SqlBatchStore,
) -> None:
    for job_id, tenant in (("pbatch_a", "alpha"), ("pbatch_b", "beta"), ("pbatch_old", "")):
        job = replace(record(job_id), tenant=tenant)
        await store.create(job, QUESTIONS, owner="A", lease_s=LEASE_S)
    got = await store.job("pbatch_a")
    assert got is not None and got.tenant == "alpha"
    assert {j.id for j in await store.jobs(tenant="alpha")} == {"pbatch_a", "pbatch_old"}
    assert len(await store.jobs()) == 3
