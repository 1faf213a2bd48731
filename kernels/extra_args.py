"""Reading a logits processor's per-request arguments (``SamplingParams.extra_args``;
HTTP: ``vllm_xargs``): the strict scalar rules every thinkgate processor shares.

Over HTTP every value is a scalar and a string stays a string, so types are checked
strictly: ``"5"`` and ``True`` are refused, not coerced. A bad value is a ``ValueError``
naming its key (vLLM answers the request with a 400 at admission).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Final, TypeVar

logger = logging.getLogger(__name__)
P = TypeVar("P")

# Token ids are bounded by int32 (they live in int32 state tensors); the vocab bound is
# checked by the processor that knows the vocab size.
MAX_TOKEN_ID: Final = 2**31 - 1


def int_arg(extra: Mapping[str, object], key: str, lo: int, hi: int) -> int | None:
    """The int at ``key`` in ``[lo, hi]``, None when absent; ValueError naming the key."""
    if key not in extra or extra[key] is None:
        return None
    value = extra[key]
    # bool is an int subclass; True as a budget is a client bug, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"extra_args[{key!r}] must be an integer, got {type(value).__name__} {value!r}"
        )
    if not lo <= value <= hi:
        raise ValueError(f"extra_args[{key!r}] must be in [{lo}, {hi}], got {value}")
    return value


def float_arg(extra: Mapping[str, object], key: str, lo: float, hi: float) -> float | None:
    """The number at ``key`` (an int or a float, finite) in ``[lo, hi]``, None when absent;
    ValueError naming the key. Instants in seconds travel this way (``vllm_xargs`` keeps a
    JSON number a number)."""
    if key not in extra or extra[key] is None:
        return None
    value = extra[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"extra_args[{key!r}] must be a number, got {type(value).__name__} {value!r}"
        )
    number = float(value)
    if not math.isfinite(number) or not lo <= number <= hi:
        raise ValueError(f"extra_args[{key!r}] must be in [{lo}, {hi}], got {value}")
    return number


def usable_args(
    parse: Callable[[Mapping[str, object] | None], P | None],
    extra: Mapping[str, object] | None,
    *,
    processor: str,
    vocab_size: int | None = None,
    token_ids: Callable[[P], Iterable[int]] = lambda _: (),
) -> P | None:
    """A row's parsed arguments inside the engine, or None (the row is left alone).

    Every adapter (V1 and V2) admits a row through this: vLLM has already refused a bad
    request at admission (``validate_params``), so a ValueError here means a request
    that bypassed it; it is logged and ignored, never raised (raising inside the engine
    kills every request in it). Token ids the processor would force (``token_ids``) must
    lie inside the model's vocabulary (the gateway cannot know it for a remote server)."""
    try:
        parsed = parse(extra)
    except ValueError as exc:
        logger.warning("thinkgate %s: ignoring bad extra_args: %s", processor, exc)
        return None
    if (
        parsed is not None
        and vocab_size is not None
        and max(token_ids(parsed), default=-1) >= vocab_size
    ):
        logger.warning(
            "thinkgate %s: token id outside the vocab (%d); not applied", processor, vocab_size
        )
        return None
    return parsed
