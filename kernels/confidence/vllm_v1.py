"""DeepConf's online early stop as a vLLM V1-runner logits processor (the CPU engine).

Load it explicitly, like Elastic (``--logits-processors confidence`` in thinkgate,
``kernels.confidence.vllm_v1:ConfidenceLogitsProcessor`` for vLLM's own server), and
**before** any processor that masks logits: the token confidence is read from the
logits this processor receives. Requests opt in with the ``extra_args`` keys of
:mod:`kernels.confidence.args`.

Per step, :meth:`update_state` does the batch bookkeeping and writes each active row's
generated-token count (O(active rows) of Python, as Elastic's V1 adapter and vLLM's
MinTokens do); :meth:`apply` is one batched op (:mod:`kernels.confidence.ops`) with no
per-row loop and no host sync. Assumes synchronous scheduling, as on CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from kernels.adapters import RowArgs
from kernels.batch_moves import apply_batch_update, drop_every_row
from kernels.confidence import args as conf_args
from kernels.confidence.ops import confidence_step
from kernels.confidence.state import ConfCol, new_state, row_values

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig


class ConfidenceLogitsProcessor(RowArgs[conf_args.ConfidenceArgs], LogitsProcessor):
    """Ends a trace whose sliding-window confidence falls below its request's threshold."""

    name: ClassVar[str] = conf_args.PROCESSOR_NAME  # as reported in Engine.processors
    label: ClassVar[str] = "confidence"
    parse_args = staticmethod(conf_args.parse)
    forced_ids = staticmethod(conf_args.forced_ids)

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._vocab_size = vllm_config.model_config.get_vocab_size()
        self._state = new_state(
            vllm_config.scheduler_config.max_num_seqs, device, pin_memory=is_pin_memory
        )
        # row -> (vLLM's live output-token list, the request's k)
        self._rows: dict[int, tuple[list[int], int]] = {}
        self._max_k = 1  # the largest top-k among the rows (the op's topk width)

    def is_argmax_invariant(self) -> bool:
        """Forcing EOS changes the argmax, so greedy rows must see it."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        try:
            if batch_update is not None:
                self._apply_batch_update(batch_update)
                # Known on the host, once per batch change: apply() stays loop-free.
                self._max_k = max((k for _, k in self._rows.values()), default=1)
            if self._rows:
                rows = list(self._rows)
                gen = [len(self._rows[r][0]) for r in rows]
                self._state.table.set_column(ConfCol.GEN, rows, gen)
            self._state.table.flush()
        except Exception:
            self._fail("update_state")

    def _apply_batch_update(self, batch_update: BatchUpdate) -> None:
        apply_batch_update(batch_update, self._state, self._rows, self._admit)

    def _admit(
        self, row: int, params: SamplingParams, out: list[int]
    ) -> tuple[list[int], int] | None:
        parsed = self.row_args(params, self._vocab_size)
        if parsed is None:
            return None
        values = row_values(parsed)
        values[ConfCol.START] = len(out)  # a resumed row restarts its window here
        self._state.table.write(row, values)
        self._state.reset_slot(row)
        return out, parsed.top_k

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Once per step on ``[num_rows, vocab]`` fp32 logits; in place, never raises."""
        if not self._rows:
            return logits
        try:
            rows = logits.shape[0]
            table = self._state.table.device
            slots = torch.arange(rows, device=logits.device)
            max_k = min(self._max_k, logits.shape[1])
            confidence_step(logits, self._state, slots, table[ConfCol.GEN, :rows], max_k)
        except Exception:
            self._fail("apply")
        return logits

    def _fail(self, where: str) -> None:
        """Log once and deactivate every row: unguarded traces beat a dead engine."""
        self.report_failure(where, "early stop disabled")
        drop_every_row(self._state.table, self._rows)
