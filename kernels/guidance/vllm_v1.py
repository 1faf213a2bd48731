"""Budget guidance as a vLLM V1-runner logits processor (the CPU engine).

Load it explicitly (``logits_processors=[BudgetGuidanceLogitsProcessor]`` or
``--logits-processors kernels.guidance.vllm_v1:BudgetGuidanceLogitsProcessor``) on an engine
whose model is :class:`kernels.guidance.model.BGQwen2ForCausalLM` (``hf_overrides``). Requests
opt in with the ``extra_args`` keys of :mod:`kernels.guidance.args`.

A row is *guided* at a step when it asked for a budget ``B > 0``, is still thinking, and
the step is a line boundary (its first step, or the previous token's text contains a
newline). Per step:

* :meth:`update_state` (host): batch changes, then per active row the new output tokens
  (``</think>`` closes thinking; USED counts thinking tokens; BOUNDARY from the last
  token). O(active rows) of Python, as in the Elastic processor; the guided rows and
  their remaining budgets ``b = max(1, B - USED)`` are then selected with numpy over
  the row-state table and copied to the device once.
* :meth:`apply`: takes the step's hidden states from the stash, returns at once when no
  row is guided, else runs the predictor on the guided rows only and one batched
  reweighting op (:func:`kernels.guidance.reweight.apply_gamma_reweight`). No per-row loop, no
  ``.item()``/``.tolist()``, and it never raises: a failure is logged once and the
  logits pass through.

Without the wrapper model (plain architecture) there is nothing in the stash: guided
requests are decoded unguided and a warning is logged once. The gateway does not send
guided requests to such an engine (the strategy answers 503 first).

Temperature: vLLM divides the processed logits by the request temperature after the
processors, so ``log F`` is scaled by ``1/T`` too (the paper bypasses temperature,
top-p and top-k at boundary steps). At ``T = 1`` the two agree; top-p/top-k still
apply after guidance here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from vllm.v1.sample.logits_processor import (
    BatchUpdate,
    LogitsProcessor,
)

from kernels.adapters import RowArgs
from kernels.batch_moves import apply_batch_update, drop_every_row
from kernels.guidance import args as guidance_args
from kernels.guidance.reweight import apply_gamma_reweight
from kernels.guidance.stash import STASH, GuidanceModel
from kernels.guidance.state import GuidanceCol, new_state, row_values

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Track:
    """Host-side token tracking of one guided row (mutable: updated per step)."""

    out: list[int]  # vLLM's live output-token list of the request
    thinking: bool
    used: int = 0
    boundary: bool = True
    scanned: int = 0
    matched: int = 0  # tokens of a multi-token closing the output ends with

    def step(self, model: GuidanceModel) -> None:
        out, n = self.out, len(self.out)
        closing = model.closing
        for i in range(self.scanned, n):
            if not self.thinking:
                break
            tok = out[i]
            self.matched = closing.advance(self.matched, tok)
            if self.matched == len(closing):
                # The whole closing is in: its earlier tokens were counted as thinking.
                self.thinking = False
                self.used -= len(closing) - 1
            else:
                self.used += 1
                self.boundary = tok in model.boundary_ids
        self.scanned = n


class BudgetGuidanceLogitsProcessor(RowArgs[guidance_args.GuidanceArgs], LogitsProcessor):
    """Steers thinking toward a budget B with the Gamma predictor, in the same step."""

    # The name the gateway reports in Engine.processors (strategies.thinking.budget_guidance).
    name: ClassVar[str] = guidance_args.PROCESSOR_NAME
    label: ClassVar[str] = "budget guidance"
    parse_args = staticmethod(guidance_args.parse)

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._device = torch.device(device)
        self._pin = is_pin_memory and self._device.type != "cpu"
        self._state = new_state(
            vllm_config.scheduler_config.max_num_seqs, self._device, pin_memory=is_pin_memory
        )
        self._tracks: dict[int, _Track] = {}
        self._num_guided = 0
        self._rows = torch.zeros(0, dtype=torch.int64, device=self._device)
        self._budget = torch.zeros(0, dtype=torch.int32, device=self._device)
        self._mask = torch.zeros(0, dtype=torch.int32, device=self._device)
        self._warned_unavailable = False

    def is_argmax_invariant(self) -> bool:
        """Guidance changes which token is most likely, so greedy rows must see it."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Once per step before :meth:`apply`: batch changes, tokens, guided-row selection."""
        try:
            if batch_update is not None:
                self._apply_batch_update(batch_update)
            self._num_guided = 0
            if not self._tracks:
                return
            model = STASH.model
            if model is None:
                self._unavailable()
                return
            rows = list(self._tracks)
            for row in rows:
                self._tracks[row].step(model)
            tracks = [self._tracks[row] for row in rows]
            st = self._state
            st.set_column(GuidanceCol.CLOSED, rows, [int(not t.thinking) for t in tracks])
            st.set_column(GuidanceCol.USED, rows, [t.used for t in tracks])
            st.set_column(GuidanceCol.BOUNDARY, rows, [int(t.boundary) for t in tracks])
            self._select_guided()
        except Exception:
            # Raising here kills the engine for every request; drop our state instead.
            self._fail("update_state")

    def _select_guided(self) -> None:
        """Guided rows and their remaining budgets, from the host table (vectorised)."""
        cols = self._state.host_np
        guided = (
            (cols[GuidanceCol.ACTIVE] != 0)
            & (cols[GuidanceCol.CLOSED] == 0)
            & ((cols[GuidanceCol.BOUNDARY] != 0) | (cols[GuidanceCol.ALL_STEPS] != 0))
        )
        rows = np.flatnonzero(guided)
        self._num_guided = int(rows.size)
        if not rows.size:
            return
        # b = max(1, B - used): the remaining budget never goes below 1 (spec).
        budget = np.maximum(1, cols[GuidanceCol.BUDGET, rows] - cols[GuidanceCol.USED, rows])
        mask = cols[GuidanceCol.MASK, rows]
        self._rows = self._to_device(torch.from_numpy(rows.astype(np.int64)))
        self._budget = self._to_device(torch.from_numpy(budget.astype(np.int32)))
        self._mask = self._to_device(torch.from_numpy(mask.astype(np.int32)))

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        if self._device.type == "cpu":
            return host
        return (host.pin_memory() if self._pin else host).to(self._device, non_blocking=True)

    def _apply_batch_update(self, batch_update: BatchUpdate) -> None:
        apply_batch_update(batch_update, self._state, self._tracks, self._admit)

    def _admit(self, row: int, params: SamplingParams, out: list[int]) -> _Track | None:
        parsed = self.row_args(params, None)  # it forces no token
        if parsed is None:
            return None
        self._state.write(row, row_values(parsed))
        return _Track(out, thinking=parsed.thinking_open)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Once per step on ``[num_rows, vocab]`` fp32 logits; in place, never raises."""
        # Always consume the stash, so no later step can see this step's hidden states.
        hidden = STASH.take(logits.shape[0])
        if not self._num_guided:
            return logits
        try:
            model = STASH.model
            if model is None or hidden is None:
                self._unavailable()
                return logits
            a_raw, l_raw = model.predictor.raw(hidden.index_select(0, self._rows))
            apply_gamma_reweight(logits, self._rows, a_raw, l_raw, self._budget, self._mask)
        except Exception:
            self._fail("apply")
        return logits

    def _unavailable(self) -> None:
        if not self._warned_unavailable:
            logger.warning(
                "thinkgate budget guidance: no predictor hidden states in this engine (model "
                "not loaded as BGQwen2ForCausalLM, or speculative decoding); guided requests "
                "are decoded unguided"
            )
            self._warned_unavailable = True

    def _fail(self, where: str) -> None:
        """Log once and stop guiding every row: unguided output beats a dead engine."""
        self.report_failure(where, "guidance disabled")
        self._num_guided = 0
        drop_every_row(self._state, self._tracks)
