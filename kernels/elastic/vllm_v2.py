"""Elastic Reasoning as a Model Runner V2 logits processor (vLLM's GPU default).

Load it explicitly: ``logits_processors=[ElasticLogitsProcessorV2]`` or
``--logits-processors kernels.elastic.vllm_v2:ElasticLogitsProcessorV2``. The V2 loader rejects
V1-interface classes, hence a second adapter over the same ops as
:mod:`kernels.elastic.vllm_v1`. Requests opt in with the ``extra_args`` keys of
:mod:`kernels.elastic.args`.

Slots are recycled through a free list and there is no removal call: ``add_request``
overwrites the whole slot row (inactive when the request does not opt in). Per step
:meth:`apply` runs two launches for the batch: the tracking op (phase and tokens used,
from the committed tokens on the device) and the mask op, rows mapped to slots by
``ctx.expanded_idx_mapping``. Nothing is read back to the host; the early exit uses
the host copy of the ACTIVE column and ``ctx.idx_mapping_np``.

V2 requires Triton and CUDA, so on CPU this module is exercised by unit tests with
hand-built contexts, never inside an engine.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor

from kernels.adapters import RowArgs
from kernels.elastic import args as elastic_args

if TYPE_CHECKING:
    import torch
    from vllm import SamplingParams
    from vllm.config import VllmConfig
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState


class ElasticLogitsProcessorV2(RowArgs[elastic_args.ElasticArgs], LogitsProcessor):
    """Thinking budget t and solution budget s per request, in one engine pass."""

    name: ClassVar[str] = elastic_args.PROCESSOR_NAME  # as reported in Engine.processors

    label: ClassVar[str] = "elastic"
    parse_args = staticmethod(elastic_args.parse)
    forced_ids = staticmethod(elastic_args.forced_ids)

    def __init__(self, vllm_config: VllmConfig, req_states: LogitsProcRequestState) -> None:
        # Imported here, in the worker: vLLM also loads this class in the frontend (for
        # validate_params) and asks V2 processor modules to stay import-light.
        import torch

        from kernels.elastic.mask import apply_elastic_mask
        from kernels.elastic.state import ElasticCol, new_state, row_values
        from kernels.elastic.track import apply_elastic_track

        self._row_values = row_values
        self._track = apply_elastic_track
        self._mask = apply_elastic_mask
        self._req_states = req_states
        device = torch.device(req_states.device)
        self._state = new_state(req_states.max_num_reqs, device, pin_memory=device.type == "cuda")
        # Host view of ACTIVE: the early exit must not touch the device.
        self._active_np: np.ndarray = self._state.host_np[ElasticCol.ACTIVE]
        # Host view of END_LEN: a batch with a multi-token closing takes the torch ops
        # (the Triton kernels force and find one token only); known without a sync.
        self._end_len_np: np.ndarray = self._state.host_np[ElasticCol.END_LEN]
        # Host view of THINK_MIN (a batch holding a minimum back takes the torch op too),
        # and each slot's thinking deadline (time.time() seconds; inf: none), compared
        # with the clock on the host once per step.
        self._min_np: np.ndarray = self._state.host_np[ElasticCol.THINK_MIN]
        self._deadline_np: np.ndarray = np.full(req_states.max_num_reqs, np.inf)
        self._col_budget = int(ElasticCol.THINK_BUDGET)
        self._col_min = int(ElasticCol.THINK_MIN)

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        """When a request takes slot ``req_idx``: overwrite the slot; True if budgeted."""
        parsed = self.row_args(sampling_params, self._req_states.vocab_size)
        if parsed is None:
            self._state.clear(req_idx)
            self._deadline_np[req_idx] = float("inf")
            return False
        self._state.write(req_idx, self._row_values(parsed))
        deadline = parsed.think_deadline if parsed.thinking_open else None
        self._deadline_np[req_idx] = float("inf") if deadline is None else deadline
        return True

    def _end_due_thinking(self, slots: np.ndarray) -> None:
        """Scheduled slots whose thinking deadline has come: budget and minimum 0 from
        this step on. The host row is shipped whole: its device-owned tracking columns
        go back to their start values, and the tracking op, which runs next, rescans the
        row's committed tokens from the prompt's end and finds the same phase again."""
        due = slots[self._deadline_np[slots] <= time.time()]
        if not due.size:
            return
        rows = [int(s) for s in due]
        self._deadline_np[due] = float("inf")
        zeros = [0] * len(rows)
        self._state.set_column(self._col_budget, rows, zeros)
        self._state.set_column(self._col_min, rows, zeros)
        self._state.flush()

    def apply_staged_writes(self) -> None:
        """Once per step before the forward pass: ship the rows written by add_request."""
        self._state.flush()

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        """Once per step on ``[num_logits_rows, vocab]`` fp32 logits; in place, never raises."""
        if not self._active_np[ctx.idx_mapping_np].any():
            return logits
        try:
            rs = self._req_states
            slots = ctx.idx_mapping_np
            if (self._deadline_np[slots] < float("inf")).any():
                self._end_due_thinking(slots)
            table = self._state.device
            end_len = int(self._end_len_np[slots].max())
            minimum = bool(self._min_np[slots].any())
            self._track(
                table,
                ctx.idx_mapping,
                rs.all_token_ids.gpu,
                rs.prompt_len.gpu,
                rs.total_len.gpu,
                end_len,
            )
            self._mask(
                logits,
                table,
                ctx.expanded_idx_mapping,
                sequences=end_len > 1,
                minimum=minimum,
            )
        except Exception:
            # Raising here kills the engine for every request: pass the logits through.
            self.report_failure("apply", "logits passed through")
        return logits
