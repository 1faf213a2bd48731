"""The PETS batch jobs of one gateway: submit, look up, list, cancel, and claim.

Jobs live in a :class:`~server.batches.pets.store.BatchStore` (by default one SQLite file
under the gateway's ``--state-dir``); this object runs some of them. Each gateway
process has an owner id; a job runs where its lease is (``server.batches.pets.job``).

* **Start-up and every ``lease_s / 3``**, the gateway claims the in-progress jobs of the
  model it serves that nobody holds (released at a graceful shutdown, or lease
  expired: a gateway killed with ``kill -9``, or one that stalled) and resumes each by
  replay. So a restart resumes a gracefully stopped job at once, a killed one once its
  lease expires (``--batch-lease-s``), and a second gateway sharing the database takes
  over a dead one's jobs the same way. Jobs of other models are left alone (logged).
  Claims wait until the engine answers its health check.
* **Cancel** works from any gateway: the store marks the job cancelled and whoever runs
  it stops at its next write or renewal.
* **Shutdown** cancels the runners here (their engine requests abort), leaves their jobs
  in progress and releases their leases, so the next gateway resumes them at once.

Snapshots of a job running here are live (samples in flight included); others come
from the store.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from typing import Final

import structlog

from core.base import JSON, ResourceKey
from core.engine import Engine
from core.errors import GatewayError, InvalidRequest, NotFound, Overloaded
from server.batches.pets.admitted import Gate
from server.batches.pets.input import BatchOptions, BatchQuestion
from server.batches.pets.job import BatchJob, BatchView
from server.batches.pets.store import TERMINAL, BatchStore, JobRecord

log = structlog.get_logger("thinkgate.pets")

WATCH_POLL_S: Final = 1.0  # how often a watcher re-reads a job that runs elsewhere
MAX_TENANT_JOBS: Final = 8  # batch jobs one tenant may have running on this gateway
REPLAY_SLICE: Final = 64  # stored samples re-observed between two yields to the loop


class BatchJobs:
    """The job registry of one gateway (see the module docs)."""

    def __init__(
        self,
        engine: Engine,
        store: BatchStore,
        *,
        lease_s: float = 30.0,
        max_jobs: int = 64,
        owner: str | None = None,
    ) -> None:
        self._engine = engine
        self._store = store
        self._lease_s = lease_s
        self._max_jobs = max_jobs
        self.owner = owner or f"gw-{uuid.uuid4().hex}"
        self._running: dict[str, BatchJob] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._claimer: asyncio.Task[None] | None = None
        self._foreign: set[str] = set()  # jobs of other models, logged once each
        # The tenants' admission (``admitted.TenantGate``), bound once the server has one:
        # from then on every draw of every job, resumed ones included, passes it.
        self.gate: Gate | None = None

    @property
    def engine(self) -> Engine:
        return self._engine

    async def start(self) -> None:
        """Claim (and resume) what this gateway can run now, then keep claiming."""
        await self.claim()
        self._claimer = asyncio.get_running_loop().create_task(
            self._claim_loop(), name="pets-batch-claims"
        )

    # --- what the routes call

    async def submit(
        self, questions: Sequence[BatchQuestion], options: BatchOptions, *, tenant: str = ""
    ) -> BatchView:
        if len(self._running) >= self._max_jobs:
            raise InvalidRequest(
                f"{len(self._running)} batch jobs are running; the limit is {self._max_jobs}"
            )
        mine = sum(1 for j in self._running.values() if j.record.tenant == tenant)
        if mine >= MAX_TENANT_JOBS:
            raise Overloaded(
                f"tenant {tenant or 'anonymous'!r} has {mine} batch jobs running; the limit "
                f"is {MAX_TENANT_JOBS} a tenant: wait for one to end",
                retry_after_s=30,
                code="rate_limit_exceeded",
            )
        record = JobRecord(
            id=f"pbatch_{uuid.uuid4().hex[:16]}",
            model=self._engine.model_name,
            status="in_progress",
            options=options,
            n_questions=len(questions),
            created_at=int(time.time()),
            tenant=tenant,
        )
        await self._store.create(record, questions, owner=self.owner, lease_s=self._lease_s)
        job = self._runner(record, questions)
        self._start(job)
        return job.snapshot()

    async def snapshot(self, job_id: str) -> BatchView:
        job = self._running.get(job_id)
        if job is not None:
            return job.snapshot()
        return BatchView.of(await self._record(job_id))

    async def list_jobs(
        self, *, after: str | None = None, limit: int = 20, tenant: str | None = None
    ) -> tuple[list[BatchView], bool]:
        """A page of jobs, newest first (``after``: the last id of the page before), and
        whether more follow; ``tenant``: only that tenant's."""
        records = await self._store.jobs(after=after, limit=limit + 1, tenant=tenant)
        views = [
            self._running[r.id].snapshot() if r.id in self._running else BatchView.of(r)
            for r in records[:limit]
        ]
        return views, len(records) > limit

    async def cancel(self, job_id: str) -> BatchView:
        await self._record(job_id)  # 404 before anything else
        task = self._tasks.pop(job_id, None)
        self._running.pop(job_id, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # Any gateway may cancel: a runner elsewhere finds out at its next write.
        await self._store.finish(job_id, None, status="cancelled", completed_at=int(time.time()))
        return await self.snapshot(job_id)

    async def output(self, job_id: str) -> tuple[BatchView, list[dict[str, JSON]]]:
        """The finished job and what it stored per question, in order: each a
        ``QuestionOutcome`` as JSON (or, for jobs finished by versions that stored wire
        lines, an OpenAI batch output line; ``server/batches/pets_wire.py`` tells them apart)."""
        record = await self._record(job_id)
        if record.status != "completed":
            raise InvalidRequest(f"batch {job_id} is {record.status}; output exists once completed")
        return BatchView.of(record), await self._store.output(job_id)

    async def watch(self, job_id: str) -> AsyncIterator[BatchView]:
        """Snapshots: now, then at every change (every round here; every
        ``WATCH_POLL_S`` for a job running elsewhere), until the job ends."""
        last: BatchView | None = None
        while True:
            job = self._running.get(job_id)
            changed = job.changed if job is not None else None  # taken before reading
            snap = await self.snapshot(job_id)
            if snap != last:
                yield snap
                last = snap
            if snap.status in TERMINAL:
                return
            if changed is None:
                await asyncio.sleep(WATCH_POLL_S)
            else:
                with suppress(TimeoutError):  # not wait_for: it can drop a cancellation
                    async with asyncio.timeout(WATCH_POLL_S):
                        await changed.wait()

    async def aclose(self) -> None:
        """Shutdown: stop claiming, stop the runners here (their engine requests abort),
        and release their leases; their jobs stay in progress for the next gateway."""
        if self._claimer is not None:
            self._claimer.cancel()
            await asyncio.gather(self._claimer, return_exceptions=True)
        tasks = dict(self._tasks)
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for job_id in tasks:
            try:
                await self._store.release(job_id, self.owner)
                log.info("pets.batch.released", batch_id=job_id)
            except Exception:  # its lease expires instead
                log.exception("pets.batch.release_failed", batch_id=job_id)

    # --- claiming and running

    async def claim(self) -> list[str]:
        """Claim and resume the free jobs of this gateway's model (as many as it may
        run); ids of those resumed."""
        free = self._max_jobs - len(self._running)
        if free <= 0:
            return []
        try:
            await self._engine.health()
        except GatewayError:
            return []  # nothing to run them on yet; the next claim retries
        model = self._engine.model_name
        claimed = await self._store.claim(
            self.owner, model=model, lease_s=self._lease_s, limit=free
        )
        resumed: list[str] = []
        for job_id in claimed:
            if job_id in self._running:  # ours already (a renewal came late): keep one runner
                continue
            try:
                if await self._resume(job_id):
                    resumed.append(job_id)
            except Exception as exc:  # a job that cannot be rebuilt fails, loudly
                log.exception("pets.batch.resume_failed", batch_id=job_id)
                await self._store.finish(
                    job_id,
                    self.owner,
                    status="failed",
                    completed_at=int(time.time()),
                    error=f"resume failed: {type(exc).__name__}: {exc}",
                )
        for record in await self._store.jobs(status="in_progress", limit=1000):
            free_lease = record.owner is None or record.lease_until < time.time()
            if record.model != model and free_lease and record.id not in self._foreign:
                self._foreign.add(record.id)
                log.info(
                    "pets.batch.other_model", batch_id=record.id, model=record.model, serving=model
                )
        return resumed

    async def _claim_loop(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            try:
                await self.claim()
            except Exception:  # the store is busy or gone for now: try again next time
                log.exception("pets.batch.claim_failed")

    async def _resume(self, job_id: str) -> bool:
        record = await self._record(job_id)
        questions = await self._store.questions(job_id)
        stored = await self._store.samples(job_id)
        job = self._runner(record, questions)
        # On the loop (the tokenizer is not safe to share with a thread), in slices so
        # that a long replay never stalls the requests being served.
        for start in range(0, len(stored), REPLAY_SLICE):
            job.replay(stored[start : start + REPLAY_SLICE])
            await asyncio.sleep(0)
        if not await self._store.renew(job_id, self.owner, lease_s=self._lease_s):
            return False  # the replay outlived the lease and someone else has it
        log.info(
            "pets.batch.resumed",
            batch_id=job_id,
            samples=len(stored),
            rounds=job.rounds,
            resumed=record.resumed,
        )
        self._start(job)
        return True

    def _runner(self, record: JobRecord, questions: Sequence[BatchQuestion]) -> BatchJob:
        return BatchJob(
            record,
            questions,
            tokens=self._engine.tokens,
            store=self._store,
            owner=self.owner,
            lease_s=self._lease_s,
            gate=lambda: self.gate,
        )

    def _start(self, job: BatchJob) -> None:
        task = asyncio.get_running_loop().create_task(job.run(self._engine), name=job.id)
        self._running[job.id] = job
        self._tasks[job.id] = task
        task.add_done_callback(lambda t: self._ended(job, t))

    def _ended(self, job: BatchJob, task: asyncio.Task[None]) -> None:
        if self._tasks.get(job.id) is task:
            del self._tasks[job.id]
            self._running.pop(job.id, None)
        if task.cancelled():
            return
        if (exc := task.exception()) is not None:  # the store failed: the lease expires
            log.error("pets.batch.store_failed", batch_id=job.id, error=repr(exc))
        elif job.outcome == "lost":
            log.warning("pets.batch.lease_lost", batch_id=job.id)
        elif job.outcome == "paused":
            log.warning("pets.batch.paused", batch_id=job.id, reason="engine unavailable")
        else:
            log.info("pets.batch.ended", batch_id=job.id, status=job.status)

    async def _record(self, job_id: str) -> JobRecord:
        record = await self._store.job(job_id)
        if record is None:
            raise NotFound(f"no batch {job_id!r}", param="batch_id")
        return record


RESOURCE_KEY: Final = ResourceKey("pets_batches", BatchJobs)
