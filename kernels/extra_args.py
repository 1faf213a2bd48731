"""Reading a logits processor's per-request arguments (``SamplingParams.extra_args``;
HTTP: ``vllm_xargs``): the strict scalar rules every thinkgate processor shares.

Over HTTP every value is a scalar and a string stays a string, so types are checked
strictly: ``"5"`` and ``True`` are refused, not coerced. A bad value is a ``ValueError``
naming its key (vLLM answers the request with a 400 at admission).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

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
