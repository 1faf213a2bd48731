"""The Batch API's store and runner on both databases (SQLite, and a real PostgreSQL
server for the session, a new database per test): leases, exactly-once answers, a dead
runner's batch taken over, cancel, finalisation; the runner's lines over a scripted
call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from core.base import JSON
from server.batches.lines import read_lines
from server.batches.records import BatchRecord, Line, new_id
from server.batches.runner import Answer, BatchRunner
from server.batches.store import BatchStore


@pytest.fixture
async def store(store_target: str) -> AsyncIterator[BatchStore]:
    s = BatchStore(store_target)
    yield s
    await s.aclose()


async def _batch(store: BatchStore, n: int, *, expires_at: int = 2**40) -> str:
    """A batch of ``n`` lines in progress (by default its window far off: it runs)."""
    record = BatchRecord(
        id=new_id("batch_"),
        owner="t",
        endpoint="/v1/chat/completions",
        input_file_id="file-x",
        status="in_progress",
        created_at=1,
        expires_at=expires_at,
        times={"in_progress": 1},
    )
    lines = [Line(index=i, custom_id=f"q{i}", body={"i": i}) for i in range(n)]
    await store.create_batch(record, lines)
    return record.id


class Calls:
    """A scripted route: answers after ``delay_s``; line i % 5 == 4 is a 400; counts."""

    def __init__(self, delay_s: float = 0.0, busy_first: int = 0) -> None:
        self.delay_s = delay_s
        self.seen: list[int] = []
        self.busy = busy_first

    async def __call__(self, endpoint: str, body: dict[str, JSON], tenant: str) -> Answer:
        if self.busy > 0:
            self.busy -= 1
            return Answer(429, {"error": {}}, "rid", retry_after_s=0.01)
        await asyncio.sleep(self.delay_s)
        i = int(body["i"])  # type: ignore[call-overload]
        self.seen.append(i)
        if i % 5 == 4:
            return Answer(400, {"error": {"message": "bad"}}, f"r{i}")
        return Answer(200, {"answer": i}, f"r{i}")


async def _until(store: BatchStore, batch_id: str, status: str, timeout: float = 20) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            found = await store.batch(batch_id)
            assert found is not None
            if found[0].status == status:
                return found
            await asyncio.sleep(0.02)


async def test_a_batch_runs_to_its_output_and_error_files(store: BatchStore) -> None:
    batch_id = await _batch(store, 12)
    calls = Calls(busy_first=3)  # a full server first: waited out, not answered
    runner = BatchRunner(store, calls, lease_s=1.0, concurrency=4)
    await runner.start()
    record, counts = await _until(store, batch_id, "completed")
    await runner.aclose()
    assert (counts.total, counts.completed, counts.failed) == (12, 10, 2)
    assert sorted(calls.seen) == list(range(12))
    output = (await store.content(record.output_file_id) or b"").splitlines()
    errors = (await store.content(record.error_file_id) or b"").splitlines()
    assert [orjson.loads(x)["custom_id"] for x in output] == [
        f"q{i}" for i in range(12) if i % 5 != 4
    ]
    failed = [orjson.loads(x) for x in errors]
    assert [f["custom_id"] for f in failed] == ["q4", "q9"]
    assert failed[0]["response"]["status_code"] == 400 and failed[0]["error"] is None
    assert (await store.file(record.output_file_id)).purpose == "batch_output"  # type: ignore[union-attr]


async def test_a_dead_runners_batch_is_taken_over_and_every_line_answered_once(
    store: BatchStore,
) -> None:
    batch_id = await _batch(store, 40)
    slow = Calls(delay_s=0.05)
    first = BatchRunner(store, slow, lease_s=0.6, concurrency=4, owner="first")
    await first.start()
    async with asyncio.timeout(20):
        while len(slow.seen) < 8:
            await asyncio.sleep(0.01)
    # Killed: its tasks stop without releasing the lease (as kill -9 leaves it).
    assert first._claimer is not None
    first._claimer.cancel()
    for task in list(first._tasks.values()):
        task.cancel()
    await asyncio.sleep(0.05)
    second_calls = Calls()
    second = BatchRunner(store, second_calls, lease_s=0.6, concurrency=4, owner="second")
    await second.start()
    _, counts = await _until(store, batch_id, "completed")
    await second.aclose()
    assert counts.completed + counts.failed == 40
    by = await store.answered_by(batch_id)
    assert set(by) == {"first", "second"} and sum(by.values()) == 40
    answers = await store.answers(batch_id)
    assert [i for i, _, _ in answers] == list(range(40))  # each line once


async def test_two_runners_at_once_answer_each_line_once(store: BatchStore) -> None:
    batch_id = await _batch(store, 30)
    a = BatchRunner(store, Calls(delay_s=0.01), lease_s=0.5, concurrency=4, owner="a")
    b = BatchRunner(store, Calls(delay_s=0.01), lease_s=0.5, concurrency=4, owner="b")
    await asyncio.gather(a.start(), b.start())
    _, counts = await _until(store, batch_id, "completed")
    await asyncio.gather(a.aclose(), b.aclose())
    assert counts.completed + counts.failed == 30
    assert len(await store.answers(batch_id)) == 30


async def test_a_cancelled_batch_ends_with_what_was_answered(store: BatchStore) -> None:
    batch_id = await _batch(store, 50)
    calls = Calls(delay_s=0.05)
    runner = BatchRunner(store, calls, lease_s=0.3, concurrency=2)
    await runner.start()
    async with asyncio.timeout(20):
        while len(calls.seen) < 4:
            await asyncio.sleep(0.01)
    assert await store.cancel(batch_id)
    record, counts = await _until(store, batch_id, "cancelled")
    await runner.aclose()
    assert 4 <= counts.completed + counts.failed < 50
    assert "cancelling" in record.times and "cancelled" in record.times
    assert not await store.cancel(batch_id)  # over: nothing to cancel


def test_an_input_file_is_checked_line_by_line() -> None:
    good = b'{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m"}}'
    lines, errors = read_lines(good + b"\n\n" + good.replace(b'"a"', b'"b"'), "/v1/completions")
    assert [ln.custom_id for ln in lines] == ["a", "b"] and errors == []
    bad = b"\n".join(
        [
            good,
            b"{not json",
            good,  # the same custom_id again
            good.replace(b'"a"', b'"c"').replace(b"/v1/completions", b"/v1/embeddings"),
            good.replace(b'"a"', b'"d"').replace(b"POST", b"GET"),
            b'{"custom_id":"e","method":"POST","url":"/v1/completions"}',
        ]
    )
    _, errors = read_lines(bad, "/v1/completions")
    assert [(e["line"], e["code"]) for e in errors] == [
        (2, "invalid_json_line"),
        (3, "duplicate_custom_id"),
        (4, "invalid_url"),
        (5, "invalid_method"),
        (6, "missing_required_parameter"),
    ]
    assert read_lines(b"\n", "/v1/completions")[1][0]["code"] == "empty_file"


async def test_a_killed_process_batch_is_taken_over_by_another(store: BatchStore) -> None:
    """A real second process runs the batch and is SIGKILLed mid-way; this one takes the
    batch over once the dead one's lease lapses, and every line is answered once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    batch_id = await _batch(store, 60)
    worker = Path(__file__).resolve().parent.parent / "batch_worker.py"
    proc = subprocess.Popen(
        [sys.executable, str(worker), store._url, "killed", "1.0", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(60):
            while (await store.answered_by(batch_id)).get("killed", 0) < 10:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                await asyncio.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = time.monotonic()
    survivor = BatchRunner(store, Calls(), lease_s=1.0, concurrency=4, owner="survivor")
    await survivor.start()
    async with asyncio.timeout(30):
        while "survivor" not in await store.answered_by(batch_id):
            await asyncio.sleep(0.02)
    took_over_s = time.monotonic() - killed_at
    _, counts = await _until(store, batch_id, "completed")
    await survivor.aclose()
    by = await store.answered_by(batch_id)
    assert set(by) == {"killed", "survivor"} and sum(by.values()) == 60
    assert [i for i, _, _ in await store.answers(batch_id)] == list(range(60))
    assert counts.completed + counts.failed == 60
    assert took_over_s < 5  # the dead one's 1 s lease, and a claim tick of a third of it


async def test_a_batch_past_its_window_expires_with_its_lines_answered_so(
    store: BatchStore,
) -> None:
    batch_id = await _batch(store, 3, expires_at=2)  # its window long past
    calls = Calls()
    runner = BatchRunner(store, calls, lease_s=1.0)
    await runner.start()
    done, counts = await _until(store, batch_id, "expired")
    await runner.aclose()
    assert calls.seen == [] and (counts.completed, counts.failed) == (0, 3)
    assert done.output_file_id is None and "expired" in done.times
    errors = [
        orjson.loads(x) for x in (await store.content(done.error_file_id) or b"").splitlines()
    ]
    assert [e["error"]["code"] for e in errors] == ["batch_expired"] * 3
    assert all(e["response"] is None for e in errors)


async def test_a_line_whose_call_fails_is_answered_with_a_500_not_retried_forever(
    store: BatchStore,
) -> None:
    batch_id = await _batch(store, 3)

    async def call(endpoint: str, body: dict[str, JSON], tenant: str) -> Answer:
        if body["i"] == 1:
            raise RuntimeError("boom")
        return Answer(200, {"ok": True}, "r")

    runner = BatchRunner(store, call, lease_s=1.0)
    await runner.start()
    done, counts = await _until(store, batch_id, "completed")
    await runner.aclose()
    assert (counts.completed, counts.failed) == (2, 1)
    (error,) = [
        orjson.loads(x) for x in (await store.content(done.error_file_id) or b"").splitlines()
    ]
    assert error["custom_id"] == "q1" and error["response"]["status_code"] == 500


async def test_a_runner_woken_as_it_is_closed_stops_at_once(store: BatchStore) -> None:
    """A batch created while the gateway shuts down wakes the claim loop in the same tick
    as its cancellation: the loop must still stop (``asyncio.wait_for`` in Python 3.11
    returned the wake-up and dropped the cancellation, so shutdown waited out the tick)."""
    runner = BatchRunner(store, Calls(), lease_s=600.0)
    await runner.start()
    await asyncio.sleep(0.05)  # the loop is waiting for its next tick
    runner.wake()
    await asyncio.wait_for(runner.aclose(), 5.0)


async def test_a_tenant_may_queue_only_so_many_lines(store: BatchStore) -> None:
    """A new batch past the tenant's queued lines is a 429 (OpenAI's batch queue limit);
    answered lines and other tenants' do not count."""
    from core.errors import Overloaded
    from server.batches.records import FileRecord
    from server.batches.service import Batches

    line = (
        b'{"custom_id": "c%d", "method": "POST", "url": "/v1/chat/completions", '
        b'"body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}\n'
    )

    async def upload(owner: str, n: int) -> str:
        data = b"".join(line % i for i in range(n))
        fid = new_id("file-")

        async def one() -> AsyncIterator[bytes]:
            yield data

        await store.parts.write(fid, one())
        record = FileRecord(
            id=fid, owner=owner, purpose="batch", filename="b.jsonl", bytes=len(data), created_at=1
        )
        await store.create_file(record, b"")
        return fid

    runner = BatchRunner(store, Calls())  # never started: the lines stay queued
    batches = Batches(store, runner, max_file_bytes=1 << 20, max_queued_lines=5)
    body = {"endpoint": "/v1/chat/completions", "completion_window": "24h"}
    first, _ = await batches.create("t", {**body, "input_file_id": await upload("t", 3)})
    with pytest.raises(Overloaded, match="3 lines of this tenant's batches are still queued"):
        await batches.create("t", {**body, "input_file_id": await upload("t", 3)})
    await batches.create("u", {**body, "input_file_id": await upload("u", 5)})  # another's
    # Answered lines leave the queue.
    for index in range(3):
        await store.record(first.id, index, {"ok": 1}, ok=True, owner=runner.owner)
    await batches.create("t", {**body, "input_file_id": await upload("t", 5)})
