"""A batch runner in a process of its own, over a scripted route: what a gateway replica
does with a batch, for the takeover tests to SIGKILL mid-batch.

    python tests/batch_worker.py TARGET OWNER LEASE_S DELAY_S
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.base import JSON  # noqa: E402
from server.batches.runner import Answer, BatchRunner  # noqa: E402
from server.batches.store import BatchStore  # noqa: E402


async def main(target: str, owner: str, lease_s: float, delay_s: float) -> None:
    store = BatchStore(target)

    async def call(endpoint: str, body: dict[str, JSON], tenant: str) -> Answer:
        await asyncio.sleep(delay_s)
        return Answer(200, {"by": owner, **body}, "r")

    runner = BatchRunner(store, call, lease_s=lease_s, concurrency=4, owner=owner)
    await runner.start()
    print("running", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    target, owner, lease, delay = sys.argv[1:5]
    asyncio.run(main(target, owner, float(lease), float(delay)))
