"""What the routes call: files and batches of one tenant, checked as OpenAI checks them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from core.base import JSON
from core.errors import BackendUnavailable, InvalidRequest, NotFound, Overloaded, PayloadTooLarge
from server.batches.allocation import PetsAllocations
from server.batches.allocation import check as allocation_check
from server.batches.lines import read_lines
from server.batches.records import (
    ENDPOINTS,
    WINDOW_S,
    BatchRecord,
    BatchStatus,
    Counts,
    FileRecord,
    new_id,
)
from server.batches.runner import BatchRunner
from server.batches.store import BatchStore

MAX_PAGE: Final = 100
PURPOSES: Final = ("batch",)


MAX_QUEUED_LINES: Final = 100_000
UPLOADS: Final = 4  # uploads in progress at once (each spools its file to disk)


@dataclass(frozen=True, slots=True)
class Batches:
    store: BatchStore
    runner: BatchRunner
    max_file_bytes: int
    allocations: PetsAllocations | None = None  # None: allocation batches are refused
    # Lines one tenant may have waiting in running batches: past it, a new batch is a 429
    # (OpenAI's batch queue limit), so no tenant queues unbounded work.
    max_queued_lines: int = MAX_QUEUED_LINES
    uploads: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(UPLOADS))

    async def upload(
        self, owner: str, purpose: str, filename: str, chunks: AsyncIterator[bytes]
    ) -> FileRecord:
        """Store an upload as it is read (``chunks``), refusing it (413) at the first
        byte past ``max_file_bytes`` with nothing kept."""
        if purpose not in PURPOSES:
            raise InvalidRequest(
                f"purpose is {purpose!r}; this server keeps files for 'batch' only",
                param="purpose",
            )
        file_id = new_id("file-")
        size = await self.store.parts.write(file_id, self._bounded(chunks))
        record = FileRecord(
            id=file_id,
            owner=owner,
            purpose=purpose,
            filename=filename or "upload.jsonl",
            bytes=size,
            created_at=int(time.time()),
        )
        try:
            await self.store.create_file(record, b"")
        except BaseException:
            await self.store.parts.discard(file_id)
            raise
        return record

    async def _bounded(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in chunks:
            size += len(chunk)
            if size > self.max_file_bytes:
                raise PayloadTooLarge(f"the file exceeds the limit of {self.max_file_bytes} bytes")
            yield chunk

    async def file(self, owner: str, file_id: str) -> FileRecord:
        record = await self.store.file(file_id)
        if record is None or record.owner != owner:
            raise NotFound(f"no file with id {file_id!r}", param="file_id")
        return record

    async def content(self, owner: str, file_id: str) -> bytes:
        await self.file(owner, file_id)
        content = await self.store.content(file_id)
        if content is None:
            raise NotFound(f"no file with id {file_id!r}", param="file_id")
        return content

    async def reader(self, owner: str, file_id: str) -> AsyncIterator[bytes]:
        """A file's bytes a part at a time (a download), once the file is found to be
        the tenant's (a 404 before the response starts, not in the middle of it)."""
        await self.file(owner, file_id)
        inline = await self.store.inline(file_id)
        if inline is None:
            raise NotFound(f"no file with id {file_id!r}", param="file_id")
        return self._parts(inline, file_id)

    async def _parts(self, inline: bytes, file_id: str) -> AsyncIterator[bytes]:
        if inline:
            yield inline
        async for part in self.store.parts.read(file_id):
            yield part

    async def delete(self, owner: str, file_id: str) -> None:
        if not await self.store.delete_file(file_id, owner):
            raise NotFound(f"no file with id {file_id!r}", param="file_id")

    async def create(self, owner: str, body: Mapping[str, object]) -> tuple[BatchRecord, Counts]:
        endpoint = _string(body, "endpoint")
        if endpoint not in ENDPOINTS:
            raise InvalidRequest(
                f"endpoint is {endpoint!r}; this server batches {', '.join(ENDPOINTS)}",
                param="endpoint",
            )
        if _string(body, "completion_window") != "24h":
            raise InvalidRequest("completion_window must be '24h'", param="completion_window")
        metadata = _metadata(body.get("metadata"))
        allocation = None
        if body.get("allocation") is not None:
            allocation = allocation_check(body["allocation"], endpoint)
            if self.allocations is None:
                raise BackendUnavailable("offline allocation (PETS batches) is off on this server")
        file_id = _string(body, "input_file_id")
        source = await self.store.file(file_id)
        if source is None or source.owner != owner:
            raise NotFound(f"no file with id {file_id!r}", param="input_file_id")
        if source.purpose != "batch":
            raise InvalidRequest(
                f"file {file_id!r} has purpose {source.purpose!r}; a batch reads a file "
                "uploaded with purpose 'batch'",
                param="input_file_id",
            )
        content = await self.store.content(file_id) or b""
        lines, errors = read_lines(content, endpoint)
        queued = await self.store.queued_lines(owner)
        if not errors and queued + len(lines) > self.max_queued_lines:
            raise Overloaded(
                f"{queued} lines of this tenant's batches are still queued; with these "
                f"{len(lines)} that is over the {self.max_queued_lines} a tenant may queue: "
                "wait for a batch to finish",
                code="rate_limit_exceeded",
            )
        if allocation is not None and self.allocations is not None and not errors:
            job_id = await self.allocations.submit(allocation, lines, tenant=owner)
            allocation = {**allocation, "job_id": job_id}
        now = int(time.time())
        status: BatchStatus = "failed" if errors else "in_progress"
        record = BatchRecord(
            id=new_id("batch_"),
            owner=owner,
            endpoint=endpoint,
            input_file_id=file_id,
            status=status,
            created_at=now,
            expires_at=now + WINDOW_S,
            metadata=metadata,
            errors=tuple(errors),
            times={status: now},
            allocation=allocation,
        )
        await self.store.create_batch(record, [] if errors else lines)
        self.runner.wake()
        return record, Counts(total=0 if errors else len(lines))

    async def batch(self, owner: str, batch_id: str) -> tuple[BatchRecord, Counts]:
        found = await self.store.batch(batch_id)
        if found is None or found[0].owner != owner:
            raise NotFound(f"no batch with id {batch_id!r}", param="batch_id")
        record, counts = found
        job_id = (record.allocation or {}).get("job_id")
        if isinstance(job_id, str) and self.allocations is not None:
            progress = await self.allocations.progress(job_id)
            record = replace(record, allocation={**(record.allocation or {}), **progress})
        return record, counts

    async def cancel(self, owner: str, batch_id: str) -> tuple[BatchRecord, Counts]:
        record, _ = await self.batch(owner, batch_id)
        if not await self.store.cancel(batch_id) and record.status != "cancelling":
            raise InvalidRequest(
                f"batch {batch_id!r} is {record.status}; only a batch in progress can be cancelled",
                param="batch_id",
            )
        job_id = (record.allocation or {}).get("job_id")
        if isinstance(job_id, str) and self.allocations is not None:
            await self.allocations.cancel(job_id)
        self.runner.wake()
        return await self.batch(owner, batch_id)


def page_limit(raw: str | None) -> int:
    if raw is None:
        return 20
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise InvalidRequest(f"limit must be an integer from 1 to {MAX_PAGE}", param="limit")
    return int(raw)


def listed(items: list[dict[str, JSON]], limit: int) -> dict[str, JSON]:
    """An OpenAI list page of ``items`` (fetched ``limit + 1`` to know if more follow)."""
    data = items[:limit]
    return {
        "object": "list",
        "data": list(data),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(items) > limit,
    }


def _string(body: Mapping[str, object], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{name} must be a non-empty string", param=name)
    return value


def _metadata(value: object) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > 16:
        raise InvalidRequest("metadata must be an object of at most 16 pairs", param="metadata")
    for key, item in value.items():
        if not isinstance(item, str) or len(key) > 64 or len(item) > 512:
            raise InvalidRequest(
                "metadata keys are at most 64 characters and values strings of at most 512",
                param=f"metadata.{key}",
            )
    return dict(value)
