"""Which vLLM server gets a call: prompt-prefix affinity, then least outstanding samples.

The balancer keeps an approximate picture of each server's prefix cache: the hash of
every prompt block (``BLOCK`` tokens, chained, as vLLM's prefix cache hashes them) it
sent there, in a bounded LRU. A call scores each candidate by the prompt tokens it
probably has cached minus a price per sample already running there, and goes to the
best. So a follow-up call (an elastic answer pass, a PETS top-up, a second sample pool
of the same question) lands where its prompt is cached, while a shared chat-template
prefix, cached everywhere soon, weighs the same on every server and load decides.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

BLOCK: Final = 16
# One running sample is worth this many cached prompt tokens: a server holding a
# 64-token prefix wins unless it runs 16 more samples than the least loaded one.
TOKENS_PER_SAMPLE: Final = 4.0
MAX_BLOCKS: Final = 200_000


def block_hashes(prompt: Sequence[int], block: int = BLOCK) -> list[bytes]:
    """Chained hashes of the prompt's full blocks (a block's hash covers its whole prefix)."""
    out: list[bytes] = []
    prev = b""
    for end in range(block, len(prompt) + 1, block):
        chunk = ",".join(str(t) for t in prompt[end - block : end]).encode()
        prev = hashlib.blake2b(prev + chunk, digest_size=12).digest()
        out.append(prev)
    return out


class PrefixIndex:
    """Block hash -> the servers it was sent to (most recent use last), bounded LRU."""

    def __init__(self, capacity: int = MAX_BLOCKS) -> None:
        self._capacity = capacity
        self._where: OrderedDict[bytes, set[str]] = OrderedDict()

    def cached_tokens(self, hashes: Sequence[bytes], server: str, block: int = BLOCK) -> int:
        """Prompt tokens ``server`` probably holds: the run of leading blocks sent there."""
        run = 0
        for h in hashes:
            servers = self._where.get(h)
            if servers is None or server not in servers:
                break
            run += 1
        return run * block

    def record(self, hashes: Sequence[bytes], server: str) -> None:
        for h in hashes:
            servers = self._where.pop(h, None) or set()
            servers.add(server)
            self._where[h] = servers
        while len(self._where) > self._capacity:
            self._where.popitem(last=False)

    def forget(self, server: str) -> None:
        """A restarted server lost its cache."""
        for servers in self._where.values():
            servers.discard(server)


def choose(
    candidates: Sequence[str],
    outstanding: dict[str, int],
    cached: dict[str, int],
    tokens_per_sample: float = TOKENS_PER_SAMPLE,
) -> str:
    """The candidate with the best ``cached - price * outstanding`` (ties: fewest
    outstanding, then list order). ``candidates`` must not be empty."""
    if not candidates:
        raise ValueError("no candidate server")
    return max(
        candidates,
        key=lambda s: (
            cached.get(s, 0) - tokens_per_sample * outstanding.get(s, 0),
            -outstanding.get(s, 0),
            -candidates.index(s),
        ),
    )
