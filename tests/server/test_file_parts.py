"""An upload's bytes kept in parts on both databases (SQLite, and a real PostgreSQL):
written as they are read, read back in order one part at a time, dropped with the file,
dropped when the upload fails half-way, and a dead upload's parts swept at start. Then
through ``/v1/files`` on the app of ``thinkgate serve``: a file of several parts
downloads byte for byte, streamed; a refused upload leaves nothing."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from core.engine import GenerateRequest
from engines.scripted import samples_of
from server.batches.file_parts import ORPHAN_AFTER_S, PART_BYTES
from server.batches.records import FileRecord
from server.batches.store import BatchStore
from tests.server.test_uploads import HEADERS, Body


async def _chunks(*parts: bytes, fail_after: int | None = None) -> AsyncIterator[bytes]:
    for i, part in enumerate(parts):
        if fail_after is not None and i == fail_after:
            raise OSError("the client went away")
        yield part


def _record(file_id: str, size: int) -> FileRecord:
    return FileRecord(
        id=file_id,
        owner="alice",
        purpose="batch",
        filename="a.jsonl",
        bytes=size,
        created_at=int(time.time()),
    )


async def _parts(store: BatchStore, file_id: str) -> list[bytes]:
    return [p async for p in store.parts.read(file_id)]


async def test_a_file_is_written_and_read_in_parts_and_deleted_with_them(store_target: str) -> None:
    store = BatchStore(store_target)
    try:
        size = await store.parts.write("file-a", _chunks(b"A" * 1000, b"", b"B" * 10, b"C"))
        assert size == 1011
        await store.create_file(_record("file-a", size), b"")
        assert await store.content("file-a") == b"A" * 1000 + b"B" * 10 + b"C"
        assert await _parts(store, "file-a") == [b"A" * 1000, b"B" * 10, b"C"]
        assert await store.inline("file-a") == b""
        assert await store.delete_file("file-a", "alice")
        assert await _parts(store, "file-a") == []
        assert await store.content("file-a") is None
    finally:
        await store.aclose()


async def test_a_failed_upload_keeps_nothing_and_dead_uploads_are_swept(store_target: str) -> None:
    old = BatchStore(store_target, clock=lambda: time.time() - ORPHAN_AFTER_S - 60)
    try:
        with pytest.raises(OSError):
            await old.parts.write("file-f", _chunks(b"x" * 100, b"y" * 100, fail_after=1))
        assert await _parts(old, "file-f") == []
        # A gateway killed mid-upload: its parts have no file row. One long dead, one
        # another replica may still be writing.
        await old.parts.write("file-dead", _chunks(b"d" * 50))
    finally:
        await old.aclose()
    now = BatchStore(store_target)
    await now.parts.write("file-live", _chunks(b"l" * 50))
    await now.aclose()
    again = BatchStore(store_target)  # the sweep runs when a store opens
    try:
        assert await _parts(again, "file-dead") == []
        assert await _parts(again, "file-live") == [b"l" * 50]
    finally:
        await again.aclose()


def _handler(tokens: Any) -> Callable[[GenerateRequest], Any]:
    return lambda r: samples_of(tokens, "3\n</think>\\boxed{3}")


async def test_an_upload_of_several_parts_downloads_whole_and_a_refused_one_leaves_nothing(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), batch_max_file_bytes=4 * PART_BYTES) as app:
        store = app.asgi.state.gateway.batches.store
        body = Body(int(2.5 * PART_BYTES))
        r = await app.client.post("/v1/files", content=body, headers=HEADERS)
        assert r.status_code == 200, r.text
        file_id = r.json()["id"]
        assert r.json()["bytes"] == body.size
        assert [len(p) for p in await _parts(store, file_id)] == [
            PART_BYTES,
            PART_BYTES,
            PART_BYTES // 2,
        ]
        got = await app.client.get(f"/v1/files/{file_id}/content")
        assert got.status_code == 200 and got.content == b"x" * body.size
        assert "content-length" not in got.headers  # streamed, not built whole
        # Past the file's limit but within the form's slack: refused after 4 parts were
        # written, which are dropped.
        big = Body(4 * PART_BYTES + 1000)
        over = await app.client.post("/v1/files", content=big, headers=HEADERS)
        assert over.status_code == 413 and big.pulled == big.size, over.text
        listed = (await app.client.get("/v1/files")).json()["data"]
        assert [f["id"] for f in listed] == [file_id]
        rows = await store._call(lambda: store._read().all("SELECT file_id FROM tg_file_parts"))
        assert {r[0] for r in rows} == {file_id}  # the refused one left no part behind
