"""``/v1/files`` uploads bounded while they stream: a chunked upload (no Content-Length)
past the limit is a 413 before the rest is read, a tenant's body limit applies, a slow one
is a 408, and uploads in progress at once are capped (429). The app of ``thinkgate
serve`` over a scripted engine, the client's body a generator the server pulls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from core.engine import GenerateRequest
from engines.scripted import samples_of
from server.batches.service import UPLOADS
from server.tenancy.tenants import hashed

BOUNDARY = "tgboundary"
HEADERS = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


def _handler(tokens: Any) -> Callable[[GenerateRequest], Any]:
    return lambda r: samples_of(tokens, "3\n</think>\\boxed{3}")


class Body:
    """A multipart upload of ``size`` bytes in 4 KiB chunks, counting what was pulled,
    ``pause_s`` between chunks."""

    def __init__(self, size: int, pause_s: float = 0.0) -> None:
        self.size, self.pause_s, self.pulled = size, pause_s, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"'
            "\r\nContent-Type: application/jsonl\r\n\r\n"
        )
        yield head.encode()
        sent = 0
        while sent < self.size:
            chunk = b"x" * min(4096, self.size - sent)
            sent += len(chunk)
            self.pulled += len(chunk)
            if self.pause_s:
                await asyncio.sleep(self.pause_s)
            yield chunk
        yield f"\r\n--{BOUNDARY}--\r\n".encode()


async def test_a_chunked_upload_past_the_limit_is_refused_while_it_streams(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), batch_max_file_bytes=64 * 1024) as app:
        body = Body(50 * 1024 * 1024)  # 50 MB against 64 KiB
        r = await app.client.post("/v1/files", content=body, headers=HEADERS)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "payload_too_large"
        assert body.pulled < 1024 * 1024  # stopped at the limit, not after the whole file
        small = await app.client.post("/v1/files", content=Body(1000), headers=HEADERS)
        assert small.status_code == 200, small.text
        assert small.json()["bytes"] == 1000


async def test_the_tenants_body_limit_applies_to_uploads(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[tenants.small]\nkeys = ["{hashed("tg-small")}"]\nmax_body_bytes = 8192\n')
    async with scripted_app(_handler(testbed_tokens), keys_file=str(keys)) as app:
        auth = {**HEADERS, "Authorization": "Bearer tg-small"}
        r = await app.client.post("/v1/files", content=Body(20_000), headers=auth)
        assert r.status_code == 413 and "tenant 'small'" in r.json()["error"]["message"]


async def test_a_slow_upload_is_a_408_and_uploads_at_once_are_capped(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), body_read_timeout_s=1.0) as app:
        slow = await app.client.post("/v1/files", content=Body(64_000, 0.1), headers=HEADERS)
        assert slow.status_code == 408, slow.text
        held = [
            asyncio.create_task(
                app.client.post("/v1/files", content=Body(8192, 0.1), headers=HEADERS)
            )
            for _ in range(UPLOADS)
        ]
        await asyncio.sleep(0.05)  # every one of them in progress
        over = await app.client.post("/v1/files", content=Body(10), headers=HEADERS)
        assert over.status_code == 429 and "Retry-After" in over.headers
        assert [r.status_code for r in await asyncio.gather(*held)] == [200] * UPLOADS
        after = await app.client.post("/v1/files", content=Body(10), headers=HEADERS)
        assert after.status_code == 200
