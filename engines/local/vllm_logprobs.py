"""Per-token DeepConf confidences from vLLM's sample logprobs (``CompletionOutput.logprobs``).

vLLM 0.32 keeps them as ``list[dict[token_id, Logprob]]``, or as one ``FlatLogprobs``
when ``SamplingParams.flat_logprobs`` is set (``LocalEngine`` sets it: a long n=64 draw
with k = 20 would otherwise hold tens of millions of ``Logprob`` objects for the GC to
walk). Either way there is one position per generated token, in ``token_ids`` order,
and in DELTA mode only the delta's new tokens (``output_processor.py`` slices the last
``len(token_ids)`` positions; a stop string trims tokens and logprobs together).

Each position holds the sampled token first, then the top-k candidates in rank order:
``k + 1`` entries, the sampled one twice when it is among the top k. The dict form keys
them by token id, which drops that duplicate; the flat form does not, so it is deduped
here the same way (a duplicate would count the sampled logprob twice in the top k).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.engine import TokenLogprob
from core.errors import BackendError
from core.token_confidence import token_confidence
from engines.logprobs import Entry, best


def token_confidences(logprobs: object, k: int, n_tokens: int) -> tuple[float, ...]:
    """``token_confidence`` of each of the ``n_tokens`` positions of ``logprobs``."""
    if logprobs is None:
        raise BackendError("engine returned no logprobs although top_logprobs was set")
    positions = _positions(logprobs)
    if len(positions) != n_tokens:
        # Misaligned confidences would silently score the wrong tokens.
        raise BackendError(f"engine returned logprobs for {len(positions)} of {n_tokens} tokens")
    return tuple(token_confidence(values, k) for values in positions)


def _positions(logprobs: object) -> Sequence[Iterable[float]]:
    if isinstance(logprobs, list):
        return [_values(position) for position in logprobs]
    from vllm.logprobs import FlatLogprobs  # loaded already: the engine produced these

    if isinstance(logprobs, FlatLogprobs):
        ids, values = logprobs.token_ids, logprobs.logprobs
        return [
            dict(zip(ids[start:end], values[start:end], strict=True)).values()
            for start, end in zip(logprobs.start_indices, logprobs.end_indices, strict=True)
        ]
    raise BackendError(f"engine returned logprobs of an unknown type {type(logprobs).__name__}")


def _values(position: Mapping[int, Any] | None) -> list[float]:
    # A position without candidates (None) carries no information: confidence 0.
    return [float(lp.logprob) for lp in position.values()] if position else []


def client_logprobs(logprobs: object, k: int, token_ids: Sequence[int]) -> tuple[TokenLogprob, ...]:
    """The client's logprobs of ``token_ids`` (one ``TokenLogprob`` each: the token's
    own logprob and the position's ``k`` best candidates) from vLLM's sample logprobs,
    asked for with at least ``k`` candidates."""
    positions = _aligned(logprobs, token_ids, "logprobs")
    return tuple(_token(t, entries, k) for t, entries in zip(token_ids, positions, strict=True))


def client_prompt_logprobs(
    logprobs: object, k: int, prompt_ids: Sequence[int]
) -> tuple[TokenLogprob | None, ...]:
    """The same for a prompt (``RequestOutput.prompt_logprobs``): None at the first token,
    which has nothing before it."""
    positions = _aligned(logprobs, prompt_ids, "prompt logprobs")
    return tuple(
        _token(t, entries, k) if entries else None
        for t, entries in zip(prompt_ids, positions, strict=True)
    )


def _aligned(logprobs: object, ids: Sequence[int], what: str) -> list[list[Entry]]:
    """Each position's entries, one position per id (else an engine fault)."""
    if logprobs is None:
        raise BackendError(f"engine returned no {what} although the client asked for them")
    positions = _entries(logprobs)
    if len(positions) != len(ids):
        raise BackendError(f"engine returned {what} for {len(positions)} of {len(ids)} tokens")
    return positions


def _entries(logprobs: object) -> list[list[Entry]]:
    if isinstance(logprobs, list):
        return [
            [(int(t), float(lp.logprob), lp.rank) for t, lp in position.items()] if position else []
            for position in logprobs
        ]
    from vllm.logprobs import FlatLogprobs

    if isinstance(logprobs, FlatLogprobs):
        ids, values, ranks = logprobs.token_ids, logprobs.logprobs, logprobs.ranks
        return [
            [(ids[j], values[j], ranks[j]) for j in range(start, end)]
            for start, end in zip(logprobs.start_indices, logprobs.end_indices, strict=True)
        ]
    raise BackendError(f"engine returned logprobs of an unknown type {type(logprobs).__name__}")


def _token(token_id: int, entries: Sequence[Entry], k: int) -> TokenLogprob:
    """The position's entry for ``token_id`` and its ``k`` best candidates."""
    own = next((lp for t, lp, _ in entries if t == token_id), None)
    if own is None:
        raise BackendError(f"engine returned no logprob for the token {token_id} it produced")
    return TokenLogprob(token_id=token_id, logprob=own, top=best(entries, k))
