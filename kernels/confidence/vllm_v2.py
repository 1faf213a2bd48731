"""DeepConf's online early stop as a Model Runner V2 logits processor (vLLM's GPU default).

Load it explicitly (``kernels.confidence.vllm_v2:ConfidenceLogitsProcessorV2``) before
any processor that masks logits. Slots are recycled through a free list with no removal
call: ``add_request`` overwrites the whole slot (inactive when the request does not opt
in) and empties its window. Per step :meth:`apply` runs the batched op with rows mapped
to slots by ``ctx.expanded_idx_mapping`` and the generated count read on the device
(``total_len - prompt_len``); nothing is read back to the host. The early exit and the
batch's largest k use the host copy of the table and ``ctx.idx_mapping_np``.

V2 requires Triton and CUDA, so on CPU this module is exercised by unit tests with
hand-built contexts, never inside an engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor

from kernels.adapters import RowArgs
from kernels.confidence import args as conf_args

if TYPE_CHECKING:
    import numpy as np
    import torch
    from vllm import SamplingParams
    from vllm.config import VllmConfig
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState


class ConfidenceLogitsProcessorV2(RowArgs[conf_args.ConfidenceArgs], LogitsProcessor):
    """Ends a trace whose sliding-window confidence falls below its request's threshold."""

    name: ClassVar[str] = conf_args.PROCESSOR_NAME  # as reported in Engine.processors

    label: ClassVar[str] = "confidence"
    parse_args = staticmethod(conf_args.parse)
    forced_ids = staticmethod(conf_args.forced_ids)

    def __init__(self, vllm_config: VllmConfig, req_states: LogitsProcRequestState) -> None:
        # Imported here, in the worker: vLLM also loads this class in the frontend.
        import torch

        from kernels.confidence.ops import confidence_step
        from kernels.confidence.state import ConfCol, new_state, row_values

        self._step = confidence_step
        self._row_values = row_values
        self._req_states = req_states
        device = torch.device(req_states.device)
        self._state = new_state(req_states.max_num_reqs, device, pin_memory=device.type == "cuda")
        self._active_np: np.ndarray = self._state.table.host_np[ConfCol.ACTIVE]
        self._top_k_np: np.ndarray = self._state.table.host_np[ConfCol.TOP_K]

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        """When a request takes slot ``req_idx``: overwrite the slot; True if it opts in."""
        parsed = self.row_args(sampling_params, self._req_states.vocab_size)
        if parsed is None:
            self._state.table.clear(req_idx)
            return False
        self._state.table.write(req_idx, self._row_values(parsed))
        self._state.reset_slot(req_idx)
        return True

    def apply_staged_writes(self) -> None:
        self._state.table.flush()

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        """Once per step on ``[num_logits_rows, vocab]`` fp32 logits; never raises."""
        slots_np = ctx.idx_mapping_np
        if not self._active_np[slots_np].any():
            return logits
        try:
            rs = self._req_states
            slots = ctx.expanded_idx_mapping.long()
            gen = rs.total_len.gpu[slots] - rs.prompt_len.gpu[slots]
            max_k = min(int(self._top_k_np[slots_np].max()), logits.shape[1])
            self._step(logits, self._state, slots, gen, max_k)
        except Exception:
            self.report_failure("apply", "logits passed through")
        return logits
