"""Per-request arguments of the budget-guidance processors.

They travel in ``SamplingParams.extra_args`` (HTTP: ``vllm_xargs``); types are checked
strictly (``"5"`` and ``True`` are refused, not coerced), as in :mod:`kernels.elastic.args`.

A request opts in by carrying :data:`BUDGET`:

* :data:`BUDGET` ``B`` (int): the thinking budget the predictor steers toward. ``B <= 0``
  disables guidance for the request (the spec: "B <= 0 disables BG entirely"); its
  decoding is then bit-identical to an unguided request.
* :data:`THINKING_OPEN` 0/1, default 1: whether the prompt ends inside an open
  ``<think>``. With 0 the request starts in the answer phase and is never guided.
* :data:`MASK` 0/1, default 1: the spec's reliability mask on (alpha, lambda). 0 keeps
  the pure formula ``p * Pr(L <= b)``; it exists for tests and ablations.
* :data:`ALL_STEPS` 0/1, default 0: guide every thinking step, not only line
  boundaries. Not the method: the worst case of the overhead benchmark.

Token facts (``</think>``, the newline tokens that mark a line boundary) are not
request arguments: they belong to the predictor, which resolved them from the
tokenizer when it was trained (``bg_predictor/config.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kernels.extra_args import int_arg

BUDGET: Final = "thinkgate_bg_budget"
THINKING_OPEN: Final = "thinkgate_bg_thinking_open"
MASK: Final = "thinkgate_bg_mask"
ALL_STEPS: Final = "thinkgate_bg_all_steps"

KEYS: Final = (BUDGET, THINKING_OPEN, MASK, ALL_STEPS)

# Name under which an engine advertises the processor (``Engine.processors``).
PROCESSOR_NAME: Final = "guidance"

# Same bound as the elastic budgets: above it is almost surely a unit mistake, and
# every value must fit the int32 row state with room for arithmetic.
MAX_BUDGET: Final = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class GuidanceArgs:
    """A validated budget-guidance request (only built when ``budget > 0``)."""

    budget: int
    thinking_open: bool = True
    mask: bool = True
    all_steps: bool = False


def parse(extra_args: Mapping[str, object] | None) -> GuidanceArgs | None:
    """The request's :class:`GuidanceArgs`, or None when it is not guided.

    None for no :data:`BUDGET` or ``B <= 0``. Raises ValueError (naming the key) for a
    bad value, or for one of the other keys sent without a budget (a
    client that forgot the budget would otherwise be silently unguided).
    """
    if not extra_args:
        return None
    budget = int_arg(extra_args, BUDGET, -MAX_BUDGET, MAX_BUDGET)
    open_ = int_arg(extra_args, THINKING_OPEN, 0, 1)
    mask = int_arg(extra_args, MASK, 0, 1)
    all_steps = int_arg(extra_args, ALL_STEPS, 0, 1)
    if budget is None:
        stray = sorted(k for k in (THINKING_OPEN, MASK, ALL_STEPS) if k in extra_args)
        if stray:
            raise ValueError(f"extra_args{stray} given without {BUDGET!r}")
        return None
    if budget <= 0:
        return None
    return GuidanceArgs(
        budget=budget,
        thinking_open=open_ != 0 if open_ is not None else True,
        mask=mask != 0 if mask is not None else True,
        all_steps=bool(all_steps),
    )


def extra_args(budget: int, *, thinking_open: bool = True, mask: bool = True) -> dict[str, int]:
    """The ``extra_args`` entries that ask for guidance toward ``budget``."""
    out = {BUDGET: budget}
    if not thinking_open:
        out[THINKING_OPEN] = 0
    if not mask:
        out[MASK] = 0
    return out
