"""The client's logprobs as both engines read them from vLLM: a position's candidates,
best first, each token once."""

from __future__ import annotations

from collections.abc import Iterable

Entry = tuple[int, float, int | None]  # token id, logprob, vLLM's rank (1 = most likely)


def best(entries: Iterable[Entry], k: int) -> tuple[tuple[int, float], ...]:
    """The ``k`` best of a position's entries: by vLLM's rank where it gives one, else by
    logprob; each token once (vLLM lists the sampled token first, and again among the
    top candidates when it is one of them)."""
    seen: dict[int, tuple[float, float]] = {}
    for token, logprob, rank in entries:
        seen.setdefault(token, (logprob, float(rank) if rank is not None else -logprob))
    ranked = sorted(seen.items(), key=lambda item: item[1][1])[:k] if k else []
    return tuple((token, logprob) for token, (logprob, _) in ranked)
