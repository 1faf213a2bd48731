"""The prefix cache's block on CPU hosts, for every engine thinkgate starts.

vLLM caches a prompt prefix in whole blocks. Its CPU default is 128 tokens, so a prompt
shorter than 128 tokens reuses nothing and a longer one recomputes up to 127: a step
search resubmits every path at every step (the testbed's paths are 60-250 tokens), and
with 128-token blocks vLLM computed about half of those tokens again. 32 is the
smallest block vLLM's CPU attention runs at full speed (it warns below multiples of 32).
On GPUs vLLM's own default (16) stands.
"""

from __future__ import annotations

from typing import Final

CPU_BLOCK: Final = 32


def block_size(chosen: int | None, *, on_cpu: bool) -> int | None:
    """The block an engine is started with: the operator's, else ``CPU_BLOCK`` on a CPU
    host, else None (vLLM decides)."""
    if chosen is not None:
        return chosen
    return CPU_BLOCK if on_cpu else None
