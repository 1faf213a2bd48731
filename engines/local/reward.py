"""``RewardEngine``: a reward model served by a second, in-process vLLM engine.

A ``Qwen2ForSequenceClassification`` with one label (the TRL / AutoModel format) runs
in vLLM's pooling runner; ``classify`` with ``PoolingParams(use_activation=False)``
gives the raw logit per sequence (the same as transformers' ``.logits``). It sits beside the
generation engine in the same process, with its own EngineCore and KV space.

It implements ``strategies.scorers.SequenceScorer``; ``RewardModelScorer`` turns it
into the ``reward`` scorer.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from core.errors import BackendError, BackendUnavailable
from engines.local import executor, stopping
from engines.local.context import batched_tokens, served_context
from engines.local.engine import SHUTDOWN_TIMEOUT_S
from engines.local.launch import start_async_llm
from engines.local.pooling import encode_one
from engines.settings import ExecutorChoice

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

log = structlog.get_logger("thinkgate.reward")


class RewardEngine:
    """One raw reward per token sequence, all sequences of a call batched by vLLM."""

    def __init__(self, llm: AsyncLLM, *, model: str, max_model_len: int) -> None:
        self._llm = llm
        self.model = model
        self.max_model_len = max_model_len
        self._ids = itertools.count()

    @classmethod
    def start(
        cls,
        model: str,
        *,
        max_model_len: int | None = None,
        dtype: str = "float32",
        enforce_eager: bool = True,
        max_num_seqs: int = 64,
        gpu_memory_utilization: float = 0.9,
        seed: int = 0,
        spin_ms: float | None = None,
        executor_choice: ExecutorChoice = "auto",
    ) -> RewardEngine:
        """Build the pooling engine (tens of seconds on CPU); raises if it cannot serve.

        ``gpu_memory_utilization`` is this engine's share on a GPU shared with the
        generation engine; on CPU each engine has its own ``VLLM_CPU_KVCACHE_SPACE``.
        """
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform

        args = AsyncEngineArgs(
            model=model,
            runner="pooling",
            dtype=dtype,  # type: ignore[arg-type]
            max_model_len=max_model_len,  # type: ignore[arg-type]  # None: derived, as vLLM's default
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            distributed_executor_backend=executor.backend(
                executor_choice, on_cpu=current_platform.is_cpu(), world_size=1
            ),
            disable_log_stats=True,
        )
        # None: the model's own context; no prefill split (engines.local.context).
        context = served_context(args)
        args.max_model_len = context
        args.max_num_batched_tokens = batched_tokens(None, context, max_num_seqs)
        log.info("reward.starting", model=model)
        llm = start_async_llm(args, spin_ms=spin_ms)
        return cls(llm, model=model, max_model_len=context)

    async def score_sequences(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        """Raw logits, in input order. A sequence longer than the context is an error:
        truncating it would score a different response."""
        for seq in sequences:
            if not seq:
                raise BackendError("cannot score an empty sequence")
            if len(seq) > self.max_model_len:
                raise BackendError(
                    f"a scored sequence has {len(seq)} tokens; the reward model's context "
                    f"is {self.max_model_len}"
                )
        if self._llm.errored:
            raise BackendUnavailable("the reward engine is dead; the server must be restarted")
        batch = next(self._ids)
        return list(
            await asyncio.gather(
                *(self._one(f"reward-{batch}-{i}", seq) for i, seq in enumerate(sequences))
            )
        )

    async def _one(self, request_id: str, sequence: Sequence[int]) -> float:
        from vllm import PoolingParams

        params = PoolingParams(task="classify", use_activation=False)
        out = await encode_one(self._llm, request_id, sequence, params, "reward engine")
        return float(out.outputs.data[0])

    async def health(self) -> None:
        if self._llm.errored:
            raise BackendUnavailable("the reward engine is dead; the server must be restarted")

    async def aclose(self) -> None:
        stopping.stop(self._llm, SHUTDOWN_TIMEOUT_S)
