"""Batch jobs outlive their gateway: resume by replay, leases, hand-over, cancel.

Gateways here are ``BatchJobs`` objects over one store (a SQLite file, or a PostgreSQL
database), with a scripted engine (the testbed tokenizer; question q's k-th sample says
``r{k}`` and answers ``answer(q, k)``, so every stored sample names the draw it was).
A "kill" cancels a gateway's tasks without its shutdown path: nothing is released or
written, as after ``kill -9``. Leases run on a clock the test moves.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence

import pytest
import pytest_asyncio

from core.engine import (
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    SamplingConfig,
)
from core.errors import BackendUnavailable
from server.batches.pets.input import BatchOptions, BatchQuestion
from server.batches.pets.job import BatchJob, BatchView
from server.batches.pets.result import QuestionOutcome
from server.batches.pets.service import BatchJobs
from server.batches.pets.sql_store import SqlBatchStore
from testbed.tokenizer import CharCodec, chat_prompt

LEASE_S = 30.0  # real-time renewals never fire within a test; the clock decides
N_QUESTIONS = 8
OPTIONS = BatchOptions(total_budget=20, cap=4, round_size=3, draws=50, seed=1)


class Tokens:
    """The testbed tokenizer behind the ModelTokens protocol."""

    def __init__(self) -> None:
        self.codec = CharCodec()
        self.think_start_id: int | None = self.codec.encode("<think>")[0]
        self.think_end_id: int | None = self.codec.think_end_id
        self.think_start_ids: tuple[int, ...] = (self.think_start_id,)
        self.think_end_ids: tuple[int, ...] = (self.codec.think_end_id,)
        self.eos_token_ids: tuple[int, ...] = (self.codec.eos_id,)
        self.vocab_size: int = self.codec.vocab_size

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.codec.decode(list(token_ids))

    def encode(self, text: str) -> list[int]:
        return list(self.codec.encode(text))

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id])

    def render_chat(self, messages: Sequence[Mapping[str, object]]) -> list[int]:
        return list(self.codec.encode(chat_prompt(str(messages[-1]["content"]))))


TOKENS = Tokens()


def answer(q: int, k: int) -> int:
    return (q * k) % 3 if q % 2 else q % 3  # odd questions disagree with themselves


class ScriptedEngine:
    """Answers at once (or after ``delay_s``); after ``stall_after`` requests every
    further one hangs (a gateway about to be killed); ``down`` makes it unavailable."""

    model_name = "testbed-base"

    def __init__(self, *, delay_s: float = 0.0, stall_after: int | None = None) -> None:
        self.tokens: ModelTokens = TOKENS
        self.delay_s = delay_s
        self.stall_after = stall_after
        self.down = False
        self.requests: list[str] = []

    @property
    def max_model_len(self) -> int:
        return 512

    @property
    def processors(self) -> frozenset[str]:
        return frozenset()

    def load(self) -> None:
        return None

    async def generate(self, request: GenerateRequest) -> list[Sample]:
        if self.down:
            raise BackendUnavailable("engine restarting")
        self.requests.append(request.request_id)
        if self.stall_after is not None and len(self.requests) > self.stall_after:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay_s)
        _, q, drawn = request.request_id.rsplit("-", 2)
        return [
            Sample(index=j, token_ids=self._ids(int(q), int(drawn) + j), finish_reason="stop")
            for j in range(request.sampling.n)
        ]

    def _ids(self, q: int, k: int) -> tuple[int, ...]:
        assert self.tokens.think_end_id is not None
        reasoning = self.tokens.encode(f"r{k}")
        content = self.tokens.encode(f"so \\boxed{{{answer(q, k)}}}")
        return (*reasoning, self.tokens.think_end_id, *content)

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[SampleDelta, None]:
        raise NotImplementedError
        yield  # an async generator, as the protocol says

    async def health(self) -> None:
        if self.down:
            raise BackendUnavailable("engine restarting")

    async def aclose(self) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


QUESTIONS = [
    BatchQuestion(
        custom_id=f"q{i}",
        prompt_token_ids=tuple(TOKENS.render_chat([{"content": f"Compute {i}+1 mod 10."}])),
        thinking_open=True,
        sampling=SamplingConfig(max_tokens=64),
    )
    for i in range(N_QUESTIONS)
]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest_asyncio.fixture(loop_scope="function")  # the tests' own loop
async def gateways(store_target: str, clock: Clock) -> AsyncIterator[list[BatchJobs]]:
    """Gateways a test starts with ``gateway(...)``; each gets its own store (its own
    connection, as a separate process would); all are shut down at the end."""
    started: list[BatchJobs] = []
    yield started
    for jobs in started:
        await jobs.aclose()
        await jobs._store.aclose()  # the test owns the store


async def gateway(
    started: list[BatchJobs], store_target: str, clock: Clock, engine: ScriptedEngine, owner: str
) -> BatchJobs:
    jobs = BatchJobs(engine, SqlBatchStore(store_target, clock=clock), lease_s=LEASE_S, owner=owner)
    await jobs.start()
    started.append(jobs)
    return jobs


async def kill(jobs: BatchJobs) -> None:
    """As ``kill -9``: the tasks stop; nothing is released or written."""
    tasks = [t for t in (jobs._claimer, *jobs._tasks.values()) if t is not None]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    jobs._tasks.clear()
    jobs._running.clear()
    jobs._claimer = None


async def until(predicate: object, timeout_s: float = 20.0) -> None:
    assert callable(predicate)
    async with asyncio.timeout(timeout_s):
        while not await predicate():
            await asyncio.sleep(0.01)


async def drawn(jobs: BatchJobs, job_id: str) -> int:
    return (await jobs.snapshot(job_id)).record.samples_drawn


async def finished(jobs: BatchJobs, job_id: str) -> BatchView:
    async with asyncio.timeout(30):
        async for snap in jobs.watch(job_id):
            last = snap
    return last


async def check_every_draw_stored_once(jobs: BatchJobs, job_id: str) -> None:
    """Each question's stored samples are its draws 0..n-1, each exactly once, and the
    output counts exactly those."""
    stored = await jobs._store.samples(job_id)
    draws: dict[int, list[int]] = {}
    for s in stored:
        text = TOKENS.decode(s.sample.token_ids)
        match = re.match(r"r(\d+)", text)
        assert match, text
        draws.setdefault(s.question, []).append(int(match.group(1)))
    for q, ks in draws.items():
        assert sorted(ks) == list(range(len(ks))), (q, ks)
    _, docs = await jobs.output(job_id)
    outcomes = [QuestionOutcome.from_json(doc) for doc in docs]
    assert [o.custom_id for o in outcomes] == [q.custom_id for q in QUESTIONS]
    samples = [o.samples for o in outcomes]
    assert samples == [len(draws.get(q, [])) for q in range(N_QUESTIONS)]
    assert sum(samples) == len(stored) == OPTIONS.total_budget


@pytest.mark.parametrize("stall_after", [3, 12], ids=["mid-warm-up", "mid-rounds"])
async def test_a_killed_gateways_job_resumes_by_replay(
    gateways: list[BatchJobs], store_target: str, clock: Clock, stall_after: int
) -> None:
    first = ScriptedEngine(stall_after=stall_after)
    a = await gateway(gateways, store_target, clock, first, "A")
    job_id = (await a.submit(QUESTIONS, OPTIONS)).id
    await until(lambda: _at_least(a, job_id, stall_after))
    await kill(a)

    second = ScriptedEngine()
    b = await gateway(gateways, store_target, clock, second, "B")
    assert await b.claim() == []  # A's lease still runs
    assert (await b.snapshot(job_id)).status == "in_progress"
    listed, more = await b.list_jobs()
    assert [v.id for v in listed] == [job_id] and not more
    clock.now += LEASE_S + 1
    assert await b.claim() == [job_id]

    last = await finished(b, job_id)
    assert last.status == "completed"
    assert last.record.resumed == 1
    await check_every_draw_stored_once(b, job_id)
    # Only what A never stored is drawn again (its requests in flight were lost).
    stored_by_a = set(first.requests[:stall_after])
    assert not stored_by_a & set(second.requests)


async def _at_least(jobs: BatchJobs, job_id: str, n: int) -> bool:
    return await drawn(jobs, job_id) >= n


async def test_replay_rebuilds_allocation_and_tallies_exactly(
    gateways: list[BatchJobs], store_target: str, clock: Clock
) -> None:
    a = await gateway(gateways, store_target, clock, ScriptedEngine(), "A")
    job_id = (await a.submit(QUESTIONS, OPTIONS)).id
    assert (await finished(a, job_id)).status == "completed"

    store = a._store
    record = await store.job(job_id)
    assert record is not None
    job = BatchJob(
        record, await store.questions(job_id), tokens=TOKENS, store=store, owner="X", lease_s=1
    )
    job.replay(await store.samples(job_id))
    assert [o.to_json() for o in job.outcomes()] == await store.output(job_id)
    assert int(job.alloc.used.sum()) == OPTIONS.total_budget and job.rounds == record.rounds


async def test_a_gateway_that_lost_its_lease_stops_without_writing(
    gateways: list[BatchJobs], store_target: str, clock: Clock
) -> None:
    slow = ScriptedEngine(delay_s=0.02)
    a = await gateway(gateways, store_target, clock, slow, "A")
    job_id = (await a.submit(QUESTIONS, OPTIONS)).id
    await until(lambda: _at_least(a, job_id, 10))
    runner = a._running[job_id]
    # A stalls past its lease (the clock jumps) and B, sharing the database, takes over.
    clock.now += LEASE_S + 1
    b = await gateway(gateways, store_target, clock, ScriptedEngine(delay_s=0.02), "B")
    assert job_id in b._running  # claimed at start-up
    assert (await finished(b, job_id)).status == "completed"
    await until(lambda: _not_running(a, job_id))
    assert runner.outcome == "lost"
    await check_every_draw_stored_once(b, job_id)


async def _not_running(jobs: BatchJobs, job_id: str) -> bool:
    return job_id not in jobs._running


async def test_graceful_shutdown_hands_the_job_on_at_once(
    gateways: list[BatchJobs], store_target: str, clock: Clock
) -> None:
    a = await gateway(gateways, store_target, clock, ScriptedEngine(delay_s=0.02), "A")
    job_id = (await a.submit(QUESTIONS, OPTIONS)).id
    await until(lambda: _at_least(a, job_id, 5))
    await a.aclose()
    record = await a._store.job(job_id)
    assert record is not None and (record.status, record.owner) == ("in_progress", None)

    b = await gateway(gateways, store_target, clock, ScriptedEngine(), "B")  # no lease to wait for
    last = await finished(b, job_id)
    assert last.status == "completed" and last.record.resumed == 1
    await check_every_draw_stored_once(b, job_id)


async def test_cancel_from_another_gateway_stops_the_runner(
    gateways: list[BatchJobs], store_target: str, clock: Clock
) -> None:
    a = await gateway(gateways, store_target, clock, ScriptedEngine(delay_s=0.02), "A")
    job_id = (await a.submit(QUESTIONS, OPTIONS)).id
    await until(lambda: _at_least(a, job_id, 3))
    b = await gateway(gateways, store_target, clock, ScriptedEngine(), "B")
    assert (await b.cancel(job_id)).status == "cancelled"
    await until(lambda: _not_running(a, job_id))
    after = await drawn(b, job_id)
    await asyncio.sleep(0.1)
    assert await drawn(b, job_id) == after  # nothing written since
    assert (await a.snapshot(job_id)).status == "cancelled"


async def test_an_unavailable_engine_pauses_the_job_until_it_serves(
    gateways: list[BatchJobs], store_target: str, clock: Clock
) -> None:
    engine = ScriptedEngine(delay_s=0.01)
    a = await gateway(gateways, store_target, clock, engine, "A")
    job_id = (await a.submit(QUESTIONS, OPTIONS)).id
    await until(lambda: _at_least(a, job_id, 3))
    engine.down = True
    await until(lambda: _not_running(a, job_id))
    record = await a._store.job(job_id)
    assert record is not None and (record.status, record.owner) == ("in_progress", None)
    assert await a.claim() == []  # the engine still says it is down
    engine.down = False
    assert await a.claim() == [job_id]
    assert (await finished(a, job_id)).status == "completed"
    await check_every_draw_stored_once(a, job_id)
