"""Elastic Reasoning as a vLLM V1-runner logits processor (the CPU engine).

Load it explicitly: ``AsyncLLM``/``LLM(..., logits_processors=[ElasticLogitsProcessor])``
or ``python -m vllm.entrypoints.openai.api_server ... --logits-processors
kernels.elastic.vllm_v1:ElasticLogitsProcessor``; never through the auto-loaded
``vllm.logits_processors`` entry-point group (it would run in every engine of the
environment). Requests opt in with the ``extra_args`` keys of :mod:`kernels.elastic.args`.

Per step, vLLM calls :meth:`update_state` (host bookkeeping) then :meth:`apply` (one
batched mask op). The bookkeeping reads each active row's live output-token list (its
length, and any new ``</think>``): O(active rows) of Python per step, as vLLM's own
MinTokens processor does, while :meth:`apply` has no per-row loop and no host sync.
A closing sequence of several tokens is followed with a
:class:`~kernels.sequence.SequenceMatcher` per row (its partial match goes to the
MATCHED column, so the mask forces the rest of the sequence).

Assumes synchronous scheduling, as on CPU (vLLM turns async scheduling off there):
with async scheduling the last output token is a placeholder at ``update_state``
time. On GPU use :mod:`kernels.elastic.vllm_v2` (Model Runner V2, the GPU default).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from vllm.v1.sample.logits_processor import (
    BatchUpdate,
    LogitsProcessor,
)

from kernels.adapters import RowArgs
from kernels.batch_moves import apply_batch_update, drop_every_row
from kernels.elastic import args as elastic_args
from kernels.elastic.mask import apply_elastic_mask
from kernels.elastic.state import ANSWER, THINKING, ElasticCol, new_state, row_values
from kernels.sequence import SequenceMatcher

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig


@dataclass(slots=True)
class _Track:
    """Host-side token tracking of one active row (mutable on purpose: updated per step)."""

    out: list[int]  # vLLM's live output-token list of the request
    closing: SequenceMatcher  # the closing sequence (one token for most models)
    thinking: bool
    phase_start: int = 0  # index in ``out`` where the current phase began
    scanned: int = 0  # ``out[:scanned]`` holds no complete closing (while thinking)
    matched: int = 0  # ``out[:scanned]`` ends with this many of its tokens
    deadline: float | None = None  # time.time() instant that ends thinking (None: none left)
    minimum: bool = False  # holds a thinking minimum back (until the deadline, if any)

    def step(self) -> tuple[int, int, int]:
        """(phase, tokens used in it, closing tokens matched) after the tokens so far.

        A row re-added after preemption gets a fresh track over its whole output, so
        the scan restarts from 0 and finds the same state again.
        """
        n = len(self.out)
        if self.thinking and n > self.scanned:
            if len(self.closing) == 1:  # the common case: list.index runs in C
                try:
                    end = self.out.index(self.closing.seq[0], self.scanned, n) + 1
                except ValueError:
                    end = -1
            else:
                end, self.matched = self.closing.find(self.out, self.scanned, self.matched, n)
            if end >= 0:
                # The first complete closing, natural or forced, opens the answer phase.
                self.thinking = False
                self.phase_start = end
                self.matched = 0
            self.scanned = n
        return (THINKING if self.thinking else ANSWER), n - self.phase_start, self.matched


class ElasticLogitsProcessor(RowArgs[elastic_args.ElasticArgs], LogitsProcessor):
    """Thinking budget t and solution budget s per request, in one engine pass."""

    # The name the gateway reports in Engine.processors (strategies.elastic_plan.PROCESSOR).
    name: ClassVar[str] = elastic_args.PROCESSOR_NAME
    label: ClassVar[str] = "elastic"
    parse_args = staticmethod(elastic_args.parse)
    forced_ids = staticmethod(elastic_args.forced_ids)

    def __init__(self, vllm_config: VllmConfig, device: torch.device, is_pin_memory: bool) -> None:
        self._vocab_size = vllm_config.model_config.get_vocab_size()
        self._state = new_state(
            vllm_config.scheduler_config.max_num_seqs, device, pin_memory=is_pin_memory
        )
        self._tracks: dict[int, _Track] = {}
        # Some active row closes thinking with several tokens (MATCHED column in use; the
        # mask must take the torch op, which forces token MATCHED of the sequence).
        self._sequences = False
        # Some active row holds a thinking minimum back (the torch op again), or has a
        # thinking deadline still to come (checked against the clock once per step).
        self._minimum = False
        self._deadlines = False

    def is_argmax_invariant(self) -> bool:
        """Forcing a token changes the argmax, so greedy rows must see it."""
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Once per step before :meth:`apply`: batch changes, then token bookkeeping.

        Changes are applied in vLLM's order: removed, added, moved. A reused slot
        appears only in ``added`` and is fully overwritten there.
        """
        try:
            if batch_update is not None:
                self._apply_batch_update(batch_update)
                self._rescan_flags()
            if self._deadlines:
                self._end_due_thinking()
            if self._tracks:
                rows = list(self._tracks)
                steps = [self._tracks[row].step() for row in rows]
                self._state.set_column(ElasticCol.PHASE, rows, [p for p, _, _ in steps])
                self._state.set_column(ElasticCol.USED, rows, [u for _, u, _ in steps])
                if self._sequences:
                    self._state.set_column(ElasticCol.MATCHED, rows, [m for _, _, m in steps])
            self._state.flush()
        except Exception:
            # Raising here kills the engine for every request; drop our state instead.
            self._fail("update_state")

    def _rescan_flags(self) -> None:
        tracks = self._tracks.values()
        self._sequences = any(len(t.closing) > 1 for t in tracks)
        self._minimum = any(t.minimum for t in tracks)
        self._deadlines = any(t.deadline is not None for t in tracks)

    def _end_due_thinking(self) -> None:
        """Rows whose thinking deadline has come: the end of thinking is forced from this
        step on (budget and minimum 0), as if ``t`` had run out. O(rows with a deadline)
        per step, one clock read."""
        now = time.time()
        due = [r for r, t in self._tracks.items() if t.deadline is not None and t.deadline <= now]
        if not due:
            return
        for row in due:
            self._tracks[row].deadline = None
            self._tracks[row].minimum = False
        zeros = [0] * len(due)
        self._state.set_column(ElasticCol.THINK_BUDGET, due, zeros)
        self._state.set_column(ElasticCol.THINK_MIN, due, zeros)
        self._rescan_flags()

    def _apply_batch_update(self, batch_update: BatchUpdate) -> None:
        apply_batch_update(batch_update, self._state, self._tracks, self._admit)

    def _admit(self, row: int, params: SamplingParams, out: list[int]) -> _Track | None:
        parsed = self.row_args(params, self._vocab_size)
        if parsed is None:
            return None
        self._state.write(row, row_values(parsed))
        return _Track(
            out,
            SequenceMatcher(parsed.think_end_ids),
            parsed.thinking_open,
            deadline=parsed.think_deadline if parsed.thinking_open else None,
            minimum=parsed.thinking_open and parsed.thinking_min > 0,
        )

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Once per step, on ``[num_rows, vocab]`` fp32 logits; in place, never raises."""
        if not self._state.active_count:
            return logits
        try:
            return apply_elastic_mask(
                logits, self._state.device, sequences=self._sequences, minimum=self._minimum
            )
        except Exception:
            self._fail("apply")
            return logits

    def _fail(self, where: str) -> None:
        """Log once and deactivate every row: unbudgeted output beats a dead engine."""
        self.report_failure(where, "budgets disabled")
        self._sequences = self._minimum = self._deadlines = False
        drop_every_row(self._state, self._tracks)
