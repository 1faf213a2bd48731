"""Batches run: each line through this gateway's own pipeline, under a lease.

A gateway claims runnable batches whose lease is free (at start-up, every
``lease_s / 3``, and at once when one is created here), renews each lease by heartbeat,
and runs the batch's unanswered lines, ``concurrency`` at a time. A line is a request to
the batch's endpoint made inside this process (ASGI, no socket), as the batch's tenant,
so it meets every check, strategy, budget and admission rule an online request meets
(its engine calls say ``objective: batch``). A 429 or 503 is not an answer: the line
waits as told and is sent again. Any other status is the line's answer, recorded once.

An allocation batch (``server.batches.allocation``) is one PETS job instead: the runner
waits for it and answers every line from it at once.

When every line has an answer, the runner writes the output file (the 2xx answers) and
the error file (the others), in input order, and ends the batch. A cancel seen at a
renewal stops the lines in flight (their engine requests abort) and ends the batch as
cancelled with what was answered. A lost lease (another gateway took the batch: this one
stalled past it) stops the lines here without ending anything. At shutdown the runner
stops its lines and releases its leases, so another gateway resumes at once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Final

import orjson
import structlog

from core.base import JSON
from server.batches.allocation import PetsAllocations
from server.batches.records import BatchRecord, FileRecord, Line, new_id
from server.batches.store import BatchStore

log = structlog.get_logger("thinkgate.batches")

RETRY_STATUSES: Final = frozenset({429, 503})
ALL_LINES: Final = 2**31  # an allocation batch answers every line at once


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: JSON
    request_id: str
    retry_after_s: float | None = None


# (endpoint, body, tenant) -> the route's answer
Call = Callable[[str, dict[str, JSON], str], Awaitable[Answer]]


class _LeaseLost(Exception):
    pass


class BatchRunner:
    def __init__(
        self,
        store: BatchStore,
        call: Call,
        *,
        lease_s: float = 30.0,
        concurrency: int = 8,
        max_batches: int = 4,
        owner: str | None = None,
        allocations: PetsAllocations | None = None,
    ) -> None:
        self.store = store
        self._allocations = allocations
        self._call = call
        self._lease_s = lease_s
        self._concurrency = concurrency
        self._max_batches = max_batches
        self.owner = owner or f"gw-{uuid.uuid4().hex[:12]}"
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._claimer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def start(self) -> None:
        self._claimer = asyncio.get_running_loop().create_task(
            self._claim_loop(), name="batch-claims"
        )

    def wake(self) -> None:
        """A batch was created here: claim now, not at the next tick."""
        self._wake.set()

    async def aclose(self) -> None:
        if self._claimer is not None:
            self._claimer.cancel()
            await asyncio.gather(self._claimer, return_exceptions=True)
        tasks = list(self._tasks.items())
        for _, task in tasks:
            task.cancel()
        await asyncio.gather(*(t for _, t in tasks), return_exceptions=True)
        for batch_id, _ in tasks:  # handed on at once, not after the lease runs out
            with suppress(Exception):
                await self.store.release(batch_id, self.owner)

    async def _claim_loop(self) -> None:
        while True:
            try:
                room = self._max_batches - len(self._tasks)
                for batch_id in await self.store.claim(
                    self.owner, lease_s=self._lease_s, limit=room
                ):
                    log.info("batch.claimed", batch_id=batch_id, owner=self.owner)
                    task = asyncio.get_running_loop().create_task(
                        self._run(batch_id), name=f"batch-{batch_id}"
                    )
                    self._tasks[batch_id] = task
                    task.add_done_callback(self._forget(batch_id))
            except Exception as exc:  # a database hiccup: try again at the next tick
                log.error("batch.claim_failed", error=str(exc))
            self._wake.clear()
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns a wake-up that
            # lands in the same tick as a cancellation and drops the cancellation, so a
            # shutdown right after a batch was created waited out the whole tick.
            with suppress(TimeoutError):
                async with asyncio.timeout(self._lease_s / 3):
                    await self._wake.wait()

    def _forget(self, batch_id: str) -> Callable[[asyncio.Task[None]], None]:
        def done(_: asyncio.Task[None]) -> None:
            self._tasks.pop(batch_id, None)

        return done

    async def _run(self, batch_id: str) -> None:
        lines = asyncio.get_running_loop().create_task(self._lines(batch_id))
        try:
            while not lines.done():
                status = await self.store.renew(batch_id, self.owner, lease_s=self._lease_s)
                if status is None:
                    log.warning("batch.lease_lost", batch_id=batch_id, owner=self.owner)
                    lines.cancel()
                    await asyncio.gather(lines, return_exceptions=True)
                    return
                if status == "cancelling":
                    lines.cancel()
                    await asyncio.gather(lines, return_exceptions=True)
                    break
                await asyncio.wait({lines}, timeout=self._lease_s / 3)
            if lines.done() and not lines.cancelled() and lines.exception() is not None:
                log.error("batch.run_failed", batch_id=batch_id, error=str(lines.exception()))
                await self.store.release(batch_id, self.owner)
                return
            expired = lines.done() and not lines.cancelled() and lines.result() is False
            await self._finalize(batch_id, expired=expired)
        except asyncio.CancelledError:
            lines.cancel()
            await asyncio.gather(lines, return_exceptions=True)
            raise

    async def _lines(self, batch_id: str) -> bool:
        """Run the batch's unanswered lines; False: its window ran out first (the lines
        left are answered ``batch_expired``)."""
        found = await self.store.batch(batch_id)
        if found is None:
            return True
        record, _ = found
        if record.allocation is not None:
            return await self._allocated(batch_id, record)
        gate = asyncio.Semaphore(self._concurrency)

        async def one(line: Line) -> None:
            async with gate:
                try:
                    answer = await self._answer(record.endpoint, line, record.owner)
                except Exception as exc:  # never a route's answer: the line's, not the batch's
                    log.exception("batch.line_failed", batch_id=batch_id, index=line.index)
                    message = f"internal error: {type(exc).__name__}"
                    answer = Answer(
                        500, {"error": {"message": message, "type": "server_error"}}, ""
                    )
                result: dict[str, JSON] = {
                    "id": new_id("batch_req_"),
                    "custom_id": line.custom_id,
                    "response": {
                        "status_code": answer.status,
                        "request_id": answer.request_id,
                        "body": answer.body,
                    },
                    "error": None,
                }
                ok = 200 <= answer.status < 300
                await self.store.record(batch_id, line.index, result, ok=ok, owner=self.owner)

        while pending := await self.store.pending(batch_id, limit=self._concurrency * 16):
            if time.time() > record.expires_at:
                for line in pending:
                    await self.store.record(
                        batch_id, line.index, _expired(line), ok=False, owner=self.owner
                    )
                continue
            await asyncio.gather(*(one(line) for line in pending))
        return time.time() <= record.expires_at

    async def _allocated(self, batch_id: str, record: BatchRecord) -> bool:
        """An allocation batch: its lines are answered at once when its job ends (False:
        the window ran out first; the job is stopped, the lines answered expired)."""
        if self._allocations is None:
            raise RuntimeError("an allocation batch on a gateway without PETS batches")
        job_id = str((record.allocation or {})["job_id"])
        lines = await self.store.pending(batch_id, limit=ALL_LINES)
        if not lines:
            return True
        left_s = max(0.0, record.expires_at - time.time())
        try:
            answered = await asyncio.wait_for(self._allocations.answers(job_id, lines), left_s)
        except TimeoutError:
            await self._allocations.cancel(job_id)
            for line in lines:
                await self.store.record(
                    batch_id, line.index, _expired(line), ok=False, owner=self.owner
                )
            return False
        if answered is None:  # its job was cancelled on its own route: so is the batch
            await self.store.cancel(batch_id)
            return True
        for index, ok, result in answered:
            await self.store.record(batch_id, index, result, ok=ok, owner=self.owner)
        return True

    async def _answer(self, endpoint: str, line: Line, tenant: str) -> Answer:
        while True:
            answer = await self._call(endpoint, line.body, tenant)
            if answer.status not in RETRY_STATUSES:
                return answer
            # Full, draining or the engine down: not an answer; wait as told, ask again.
            await asyncio.sleep(max(0.1, answer.retry_after_s or 1.0))

    async def _finalize(self, batch_id: str, *, expired: bool = False) -> None:
        answers = await self.store.answers(batch_id)
        found = await self.store.batch(batch_id)
        owner = found[0].owner if found else ""  # the files are the batch's tenant's
        now = int(time.time())
        files: list[tuple[FileRecord, bytes]] = []
        ids: dict[bool, str | None] = {True: None, False: None}
        for ok, suffix in ((True, "output"), (False, "error")):
            lines = [orjson.dumps(line) for _, good, line in answers if good is ok]
            if not lines:
                continue
            content = b"\n".join(lines) + b"\n"
            record = FileRecord(
                id=new_id("file-"),
                owner=owner,
                purpose="batch_output",
                filename=f"{batch_id}_{suffix}.jsonl",
                bytes=len(content),
                created_at=now,
            )
            files.append((record, content))
            ids[ok] = record.id
        ended = await self.store.finalize(
            batch_id,
            self.owner,
            files,
            output_file_id=ids[True],
            error_file_id=ids[False],
            expired=expired,
        )
        log.info(
            "batch.ended" if ended else "batch.not_ours", batch_id=batch_id, lines=len(answers)
        )


def _expired(line: Line) -> dict[str, JSON]:
    """The answer of a line the batch's 24 h window closed on, as OpenAI words it."""
    return {
        "id": new_id("batch_req_"),
        "custom_id": line.custom_id,
        "response": None,
        "error": {
            "code": "batch_expired",
            "message": "This request could not be executed before the completion window expired.",
        },
    }
