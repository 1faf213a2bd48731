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

from core.errors import BackendError
from core.token_confidence import token_confidence


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
