"""Hand-off of the sampled rows' hidden states from the model to the logits processor.

vLLM computes ``logits = model.compute_logits(hidden_states[logits_indices])`` and, in
the same process and the same step, passes those logits to the logits processors.
:class:`kernels.guidance.model.BGQwen2ForCausalLM` puts the hidden states it received into
:data:`STASH`; the budget-guidance processor takes them back in ``apply``. Row ``i`` of
the stash is row ``i`` of the logits (checked: 0 mismatches over 592 steps).

The stash is global to the worker process: one guided engine per process (a second
engine, or a draft model of the same class, would overwrite it). ``take`` consumes, so
a step can never reuse the hidden states of an earlier one; a shape mismatch (e.g.
speculative decoding, whose verifier adds draft rows) yields None and no guidance.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kernels.guidance.predictor import BudgetPredictor
from kernels.sequence import SequenceMatcher


@dataclass(frozen=True, slots=True, kw_only=True)
class GuidanceModel:
    """What the wrapper model installs once its weights are loaded."""

    predictor: BudgetPredictor
    think_end_id: int
    boundary: torch.Tensor  # [vocab] bool on the model's device: token text has a newline
    boundary_ids: frozenset[int]  # the same set, for host bookkeeping
    # The whole closing sequence when ``</think>`` is several tokens; empty: one token.
    think_end_ids: tuple[int, ...] = ()
    closing: SequenceMatcher = field(init=False)  # thinking ends at its first completion

    def __post_init__(self) -> None:
        ids = self.think_end_ids or (self.think_end_id,)
        if ids[0] != self.think_end_id:
            raise ValueError("think_end_ids must start with think_end_id")
        object.__setattr__(self, "think_end_ids", ids)
        object.__setattr__(self, "closing", SequenceMatcher(ids))


class HiddenStash:
    def __init__(self) -> None:
        self._hidden: torch.Tensor | None = None
        self.model: GuidanceModel | None = None
        self.puts = 0  # compute_logits calls seen (tests compare it with apply calls)

    def put(self, hidden: torch.Tensor) -> None:
        """From ``compute_logits``: keep a reference (no copy) to this call's rows."""
        self._hidden = hidden
        self.puts += 1

    def take(self, num_rows: int) -> torch.Tensor | None:
        """From ``apply``: this step's hidden states if they match ``num_rows``; consumes."""
        hidden, self._hidden = self._hidden, None
        if hidden is None or hidden.shape[0] != num_rows:
            return None
        return hidden

    def install(self, model: GuidanceModel | None) -> None:
        self.model = model


STASH = HiddenStash()
