"""Per-request arguments of the Elastic Reasoning processors.

They travel in ``SamplingParams.extra_args`` (HTTP: ``vllm_xargs``). Over HTTP every
value is a scalar and a string stays a string, so types are checked strictly here:
``"5"`` and ``True`` are refused, not coerced.

A request opts in by carrying :data:`THINKING_BUDGET`. Then:

* :data:`THINKING_BUDGET` ``t >= 0``: at most ``t`` tokens are generated while thinking;
  the next one is forced to be ``</think>`` (``t = 0`` forces it as the first token).
* :data:`SOLUTION_BUDGET` ``s >= 0``, absent = unlimited: after ``</think>`` (natural or
  forced) at most ``s`` answer tokens, then EOS is forced. The forced EOS is not
  counted in ``s``: with ``max_tokens = t + 1 + s`` (E1's total, what
  ``strategies.elastic_plan`` sets) the length cap ends a fully used answer first
  (``finish_reason="length"``, as in the reference two-call algorithm); with a larger
  ``max_tokens`` the forced EOS ends it (``"stop"``, ``t + 1 + s + 1`` tokens).
* :data:`THINK_END_ID`, :data:`EOS_ID`: the token ids of ``</think>`` and EOS, resolved
  from the tokenizer by the caller (never hard-coded). Required with a budget.
* :data:`THINK_END_IDS`: instead of :data:`THINK_END_ID` when ``</think>`` is a token
  *sequence* (several BPE tokens, gpt-oss's channel hand-over): its ids as a
  comma-separated string (``"27,1340,29"``: ``vllm_xargs`` carries scalars only), at most
  :data:`MAX_THINK_END_TOKENS`. The whole sequence is forced, one token per step, once
  ``t`` is spent; the answer phase starts after its last token, natural or forced. A
  processor that predates this key refuses the request (THINK_END_ID missing) instead
  of forcing only the first token.
* :data:`THINKING_OPEN` 0/1, default 1: whether the prompt ends inside an open
  ``<think>`` (R1/Qwen3 templates), so decoding starts in the thinking phase. With 0
  the prompt has no open thinking block (thinking disabled, or ``<think></think>``
  already closed by the template): decoding starts in the answer phase, ``t`` is
  unused and only ``s`` applies. A ``<think>`` the model writes then is plain answer
  text; nothing reopens the thinking phase.
* :data:`THINKING_MIN` ``0 <= m <= t``, default 0: while fewer than ``m`` thinking tokens
  are spent, the first token of the closing sequence and EOS are masked, so thinking
  goes on (s1's budget forcing; the request's ``budget.thinking_min``).
* :data:`THINK_DEADLINE`: a wall-clock instant (``time.time()`` seconds, a number) at
  which thinking ends: from the first engine step at or after it, the closing sequence
  is forced as if ``t`` had run out (the minimum no longer holds). The gateway sets it
  to the request's deadline less the answer's time at the measured decode speed. The
  engine compares it with its own clock: a remote server's clock must agree with the
  gateway's (NTP); the gateway's own cut at the deadline holds regardless.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kernels.extra_args import MAX_TOKEN_ID, float_arg, int_arg

# The one name of this processor: --logits-processors, Engine.processors, replica probes.
PROCESSOR_NAME: Final = "elastic"
PREFIX: Final = "thinkgate_"
THINKING_BUDGET: Final = "thinkgate_thinking_budget"
SOLUTION_BUDGET: Final = "thinkgate_solution_budget"
THINK_END_ID: Final = "thinkgate_think_end_id"
THINK_END_IDS: Final = "thinkgate_think_end_ids"
EOS_ID: Final = "thinkgate_eos_id"
THINKING_OPEN: Final = "thinkgate_thinking_open"
THINKING_MIN: Final = "thinkgate_thinking_min"
THINK_DEADLINE: Final = "thinkgate_think_deadline"

KEYS: Final = (
    THINKING_BUDGET,
    SOLUTION_BUDGET,
    THINK_END_ID,
    EOS_ID,
    THINKING_OPEN,
    THINK_END_IDS,
    THINKING_MIN,
    THINK_DEADLINE,
)

# Budgets above this are refused: they are almost surely a unit mistake, and every
# value must fit the int32 state tensors with room for arithmetic.
MAX_BUDGET: Final = 1_000_000
# Longest closing sequence: the row state keeps one column per token (harmony's hand-over
# is 6 tokens; a BPE-split ``</think>`` is 3 to 5).
MAX_THINK_END_TOKENS: Final = 16
# Instants are seconds since the epoch: anything past this (year 2286) is a unit mistake.
MAX_INSTANT: Final = 1e10


@dataclass(frozen=True, slots=True, kw_only=True)
class ElasticArgs:
    """A validated Elastic Reasoning request: budgets and the ids they force."""

    thinking_budget: int
    solution_budget: int | None  # None: unlimited
    think_end_id: int  # the first (often only) token of the closing sequence
    eos_id: int
    thinking_open: bool = True
    # The whole closing sequence; left empty it is ``(think_end_id,)``.
    think_end_ids: tuple[int, ...] = ()
    thinking_min: int = 0  # the end of thinking is held back until this many are spent
    think_deadline: float | None = None  # time.time() instant that ends thinking

    def __post_init__(self) -> None:
        if not self.think_end_ids:
            object.__setattr__(self, "think_end_ids", (self.think_end_id,))
        elif self.think_end_ids[0] != self.think_end_id:
            raise ValueError("think_end_ids must start with think_end_id")


def parse(extra_args: Mapping[str, object] | None) -> ElasticArgs | None:
    """The request's :class:`ElasticArgs`, or None when it does not opt in.

    Raises ValueError (naming the key) for a bad value, or for ids missing while a
    budget is given. Keys of other processors are ignored; a ``thinkgate_*`` key
    without :data:`THINKING_BUDGET` is refused, because a client that sends a solution
    budget alone would otherwise be silently unbudgeted.
    """
    if not extra_args:
        return None
    thinking = int_arg(extra_args, THINKING_BUDGET, 0, MAX_BUDGET)
    if thinking is None:
        stray = sorted(k for k in extra_args if k in KEYS)
        if stray:
            raise ValueError(f"extra_args{stray} given without {THINKING_BUDGET!r}")
        return None
    solution = int_arg(extra_args, SOLUTION_BUDGET, 0, MAX_BUDGET)
    think_end = int_arg(extra_args, THINK_END_ID, 0, MAX_TOKEN_ID)
    end_ids = ids_arg(extra_args, THINK_END_IDS)
    eos = int_arg(extra_args, EOS_ID, 0, MAX_TOKEN_ID)
    open_ = int_arg(extra_args, THINKING_OPEN, 0, 1)
    minimum = int_arg(extra_args, THINKING_MIN, 0, MAX_BUDGET)
    deadline = float_arg(extra_args, THINK_DEADLINE, 0.0, MAX_INSTANT)
    if minimum is not None and minimum > thinking:
        raise ValueError(
            f"extra_args[{THINKING_MIN!r}] ({minimum}) exceeds [{THINKING_BUDGET!r}] ({thinking})"
        )
    if end_ids is not None:
        if think_end is not None and think_end != end_ids[0]:
            raise ValueError(
                f"extra_args[{THINK_END_ID!r}] and [{THINK_END_IDS!r}] disagree: "
                f"{think_end} is not the first of {list(end_ids)}"
            )
        think_end = end_ids[0]
    if think_end is None:
        raise ValueError(
            f"extra_args[{THINK_END_ID!r}] (or [{THINK_END_IDS!r}]) is required with "
            f"{THINKING_BUDGET!r}"
        )
    if eos is None:
        raise ValueError(f"extra_args[{EOS_ID!r}] is required with {THINKING_BUDGET!r}")
    return ElasticArgs(
        thinking_budget=thinking,
        solution_budget=solution,
        think_end_id=think_end,
        eos_id=eos,
        thinking_open=open_ != 0 if open_ is not None else True,
        think_end_ids=end_ids or (),
        thinking_min=minimum or 0,
        think_deadline=deadline,
    )


def ids_arg(extra: Mapping[str, object], key: str) -> tuple[int, ...] | None:
    """The comma-separated token ids at ``key`` (1 to :data:`MAX_THINK_END_TOKENS` of
    them, each a token id), None when absent; ValueError naming the key."""
    if key not in extra or extra[key] is None:
        return None
    value = extra[key]
    if not isinstance(value, str):
        raise ValueError(
            f"extra_args[{key!r}] must be a string of comma-separated token ids, got "
            f"{type(value).__name__} {value!r}"
        )
    parts = [p.strip() for p in value.split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"extra_args[{key!r}] must be comma-separated token ids, got {value!r}")
    ids = tuple(int(p) for p in parts)
    if not 1 <= len(ids) <= MAX_THINK_END_TOKENS:
        raise ValueError(
            f"extra_args[{key!r}] must hold 1 to {MAX_THINK_END_TOKENS} ids, got {len(ids)}"
        )
    if max(ids) > MAX_TOKEN_ID:
        raise ValueError(f"extra_args[{key!r}]: token id {max(ids)} out of range")
    return ids


def forced_ids(args: ElasticArgs) -> tuple[int, ...]:
    """The token ids the processor may force for ``args`` (the closing sequence, EOS)."""
    return (*args.think_end_ids, args.eos_id)
