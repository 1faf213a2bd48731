"""Per-request arguments of the confidence early-stop processor (DeepConf online).

They travel in ``SamplingParams.extra_args`` (HTTP: ``vllm_xargs``), checked strictly
as :mod:`kernels.elastic.args` checks Elastic's. A request opts in by carrying
:data:`THRESHOLD`; then:

* :data:`THRESHOLD`: a trace whose group confidence (the mean token confidence over
  its last ``window`` tokens) falls below it is ended: EOS is forced at that step.
* :data:`WINDOW` ``1..MAX_WINDOW``: the group size ``w``; nothing is stopped before
  ``w`` tokens were generated.
* :data:`TOP_K` ``1..MAX_TOP_K``: token confidence is ``-mean`` of the ``k`` largest
  logprobs of the step's distribution (raw logits: the processor must run before any
  processor that masks them).
* :data:`EOS_ID`: the id forced to end a trace (resolved from the tokenizer by the
  caller).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kernels.extra_args import MAX_TOKEN_ID, int_arg

# The one name of this processor: --logits-processors, Engine.processors, replica probes.
PROCESSOR_NAME: Final = "confidence"
THRESHOLD: Final = "thinkgate_conf_threshold"
WINDOW: Final = "thinkgate_conf_window"
TOP_K: Final = "thinkgate_conf_top_k"
EOS_ID: Final = "thinkgate_conf_eos_id"
KEYS: Final = (THRESHOLD, WINDOW, TOP_K, EOS_ID)

# The ring of recent token confidences is [max_num_seqs, MAX_WINDOW] float32 (8 MiB at
# 1024 slots); the paper's 2048 is for traces of tens of thousands of tokens.
MAX_WINDOW: Final = 2048
MAX_TOP_K: Final = 20  # vLLM's default max_logprobs: the gateway can read the same k


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfidenceArgs:
    """A validated early-stop request."""

    threshold: float
    window: int
    top_k: int
    eos_id: int


def parse(extra_args: Mapping[str, object] | None) -> ConfidenceArgs | None:
    """The request's :class:`ConfidenceArgs`, or None when it does not opt in.

    ValueError (naming the key) for a bad value, or for a ``thinkgate_conf_*`` key given
    without :data:`THRESHOLD` (a client would otherwise believe its traces are guarded).
    """
    if not extra_args:
        return None
    raw = extra_args.get(THRESHOLD)
    if raw is None:
        stray = sorted(k for k in extra_args if k in KEYS)
        if stray:
            raise ValueError(f"extra_args{stray} given without {THRESHOLD!r}")
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ValueError(f"extra_args[{THRESHOLD!r}] must be a finite number, got {raw!r}")
    window = int_arg(extra_args, WINDOW, 1, MAX_WINDOW)
    top_k = int_arg(extra_args, TOP_K, 1, MAX_TOP_K)
    eos = int_arg(extra_args, EOS_ID, 0, MAX_TOKEN_ID)
    for key, value in ((WINDOW, window), (TOP_K, top_k), (EOS_ID, eos)):
        if value is None:
            raise ValueError(f"extra_args[{key!r}] is required with {THRESHOLD!r}")
    assert window is not None and top_k is not None and eos is not None
    return ConfidenceArgs(threshold=float(raw), window=window, top_k=top_k, eos_id=eos)


def extra_args(args: ConfidenceArgs) -> dict[str, int | float]:
    """The ``extra_args`` entries that ask for ``args`` (what the strategy sends)."""
    return {THRESHOLD: args.threshold, WINDOW: args.window, TOP_K: args.top_k, EOS_ID: args.eos_id}


def forced_ids(args: ConfidenceArgs) -> tuple[int, ...]:
    """The token ids the processor may force for ``args`` (EOS, to end a trace)."""
    return (args.eos_id,)
