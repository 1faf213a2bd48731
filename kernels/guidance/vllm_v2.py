"""Budget guidance as a Model Runner V2 logits processor (vLLM's GPU default).

Load it explicitly (``logits_processors=[BudgetGuidanceLogitsProcessorV2]``) on an
engine whose model is :class:`kernels.guidance.model.BGQwen2ForCausalLM`; the V2 loader
rejects V1-interface classes, hence this second adapter over the same predictor and op
as :mod:`kernels.guidance.vllm_v1`.

Everything per step is computed on the device from the step context, with no host
sync and no per-row loop: for row ``r`` of slot ``s = ctx.expanded_idx_mapping[r]``,

* ``gen = ctx.pos[r] + 1 - prompt_len[s]`` tokens generated so far (negative on a
  partial prefill chunk, whose sample is discarded: never guided);
* ``tok = ctx.input_ids[r]``: the last generated token when ``gen >= 1``; CLOSED (a
  device-owned column) turns on when it is ``</think>``;
* boundary: ``gen == 0`` or ``tok`` is a newline token; guided when ACTIVE, not
  CLOSED, at a boundary; ``b = max(1, B - gen)`` (every generated token so far was a
  thinking token, since the row is still thinking).

Because the count of guided rows is not known on the host, the predictor runs on every
row of a batch that holds at least one guided request, and the op leaves unguided rows
untouched (budget 0). A batch with no guided request returns at once (host check of the
ACTIVE column over ``ctx.idx_mapping_np``). Speculative decoding is not supported (the
stash shape check then disables guidance for the step).

On CPU this module runs only in unit tests with hand-built contexts: V2 requires
Triton and CUDA.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
from vllm.v1.worker.gpu.sample.logits_processor import (
    LogitsContext,
    LogitsProcessor,
    LogitsProcRequestState,
)

from kernels.adapters import RowArgs
from kernels.guidance import args as guidance_args
from kernels.guidance.reweight import apply_gamma_reweight
from kernels.guidance.stash import STASH
from kernels.guidance.state import GuidanceCol, new_state, row_values

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

logger = logging.getLogger(__name__)


class BudgetGuidanceLogitsProcessorV2(RowArgs[guidance_args.GuidanceArgs], LogitsProcessor):
    """Steers thinking toward a budget B with the Gamma predictor, in the same step."""

    # The name the gateway reports in Engine.processors (strategies.thinking.budget_guidance).
    name: ClassVar[str] = guidance_args.PROCESSOR_NAME

    label: ClassVar[str] = "budget guidance"
    parse_args = staticmethod(guidance_args.parse)

    def __init__(self, vllm_config: VllmConfig, req_states: LogitsProcRequestState) -> None:
        self._req_states = req_states
        device = torch.device(req_states.device)
        self._state = new_state(req_states.max_num_reqs, device, pin_memory=device.type == "cuda")
        # Host view of ACTIVE: the early exit must not touch the device.
        self._active_np: np.ndarray = self._state.host_np[GuidanceCol.ACTIVE]
        self._warned_unavailable = False

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        """When a request takes slot ``req_idx``: overwrite the slot; True if guided."""
        parsed = self.row_args(sampling_params, None)  # it forces no token
        if parsed is None:
            self._state.clear(req_idx)
            return False
        self._state.write(req_idx, row_values(parsed))
        return True

    def apply_staged_writes(self) -> None:
        """Once per step before the forward pass: ship the rows written by add_request."""
        self._state.flush()

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        """Once per step on ``[num_logits_rows, vocab]`` fp32 logits; in place, never raises."""
        hidden = STASH.take(logits.shape[0])
        if not self._active_np[ctx.idx_mapping_np].any():
            return logits
        try:
            model = STASH.model
            if model is None or hidden is None:
                self._unavailable()
                return logits
            budget, mask = self._step(ctx, model.think_end_ids, model.boundary)
            a_raw, l_raw = model.predictor.raw(hidden)
            apply_gamma_reweight(logits, None, a_raw, l_raw, budget, mask)
        except Exception:
            # Raising here kills the engine for every request: pass the logits through.
            self.report_failure("apply", "logits passed through")
        return logits

    def _step(
        self, ctx: LogitsContext, think_end_ids: tuple[int, ...], boundary_lut: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-row remaining budget (0: not guided) and mask flag; updates CLOSED."""
        table = self._state.device
        slots = ctx.expanded_idx_mapping.to(torch.int64)
        cols = table.index_select(1, slots)
        prompt_len = self._req_states.prompt_len.gpu.index_select(0, slots)
        gen = ctx.pos.to(torch.int64) + 1 - prompt_len.to(torch.int64)
        tok = ctx.input_ids.to(torch.int64)
        active = cols[GuidanceCol.ACTIVE] != 0
        ended = active & (gen >= len(think_end_ids)) & (tok == think_end_ids[-1])
        if len(think_end_ids) > 1:
            # A multi-token closing ends at this token when the committed tokens before it
            # hold the rest of the sequence (the same window for every row: one gather).
            history = self._req_states.all_token_ids.gpu
            pos = ctx.pos.to(torch.int64)
            back = torch.arange(len(think_end_ids) - 1, 0, -1, device=pos.device)
            at = (pos.unsqueeze(1) - back).clamp(min=0)
            before = history[slots.unsqueeze(1), at].to(torch.int64)
            want = torch.tensor(think_end_ids[:-1], dtype=torch.int64).to(pos.device)
            ended &= (before == want).all(dim=1)
        closed = (cols[GuidanceCol.CLOSED] != 0) | ended
        table[GuidanceCol.CLOSED].index_put_((slots,), closed.to(table.dtype))
        vocab = boundary_lut.shape[0]
        in_vocab = (tok >= 0) & (tok < vocab)
        newline = boundary_lut[tok.clamp(0, vocab - 1)] & in_vocab
        at_boundary = (gen == 0) | ((gen >= 1) & newline) | (cols[GuidanceCol.ALL_STEPS] != 0)
        guided = active & ~closed & at_boundary & (gen >= 0)
        remaining = (cols[GuidanceCol.BUDGET].to(torch.int64) - gen).clamp_min(1)
        budget = torch.where(guided, remaining, torch.zeros_like(remaining)).to(torch.int32)
        return budget, cols[GuidanceCol.MASK]

    def _unavailable(self) -> None:
        if not self._warned_unavailable:
            logger.warning(
                "thinkgate budget guidance: no predictor hidden states in this engine (model "
                "not loaded as BGQwen2ForCausalLM, or speculative decoding); guided requests "
                "are decoded unguided"
            )
            self._warned_unavailable = True
