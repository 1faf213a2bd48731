"""The one CPU set-up of vLLM's offline ``LLM`` that thinkgate's offline tools share
(testbed evaluation and training traces, PETS pools, predictor traces, benchmarks).

Importing this module does not import vLLM; ``cpu_llm`` does. Callers that start an
engine run under an ``if __name__ == "__main__":`` guard (vLLM spawns processes).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from vllm import LLM

MAX_MODEL_LEN: Final = 512  # the testbed's context
MAX_NUM_SEQS: Final = 64
IN_PROCESS_ENV: Final = "VLLM_ENABLE_V1_MULTIPROCESSING"


def cpu_llm(
    model: Path | str,
    *,
    seed: int = 0,
    runner: Literal["generate", "pooling"] = "generate",
    max_model_len: int = MAX_MODEL_LEN,
    max_num_seqs: int = MAX_NUM_SEQS,
    in_process: bool = False,
    **engine_args: Any,
) -> LLM:
    """An engine sized for small models on CPU: float32 (CPU kernels), eager (no graph
    capture to amortise), whole prompts per step, ``VLLM_CPU_KVCACHE_SPACE`` 1 GiB
    unless set. ``engine_args`` go to ``LLM`` as they are (logits processors,
    ``hf_overrides`` ...).

    ``in_process``: built under :func:`in_process_engine`, for a short-lived caller
    (a test) that would otherwise pay for vLLM's spawned engine process."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM

    where: contextlib.AbstractContextManager[dict[str, Any]] = (
        in_process_engine() if in_process else contextlib.nullcontext({})
    )
    with where as extra:
        return LLM(
            model=str(model),
            runner=runner,
            dtype="float32",
            max_model_len=max_model_len,
            enforce_eager=True,
            seed=seed,
            # Whole prompts in one step: chunked prefill with seeds crashes the CPU sampler.
            enable_chunked_prefill=False,
            max_num_batched_tokens=max_model_len * max_num_seqs,
            max_num_seqs=max_num_seqs,
            **{**extra, **engine_args},
        )


@contextlib.contextmanager
def in_process_engine() -> Iterator[dict[str, Any]]:
    """While vLLM's ``LLM`` is built inside it: its engine core and model in this process,
    not in a process vLLM spawns on CPU (a fresh interpreter, a dozen seconds of imports
    per engine). Yields the engine argument that goes with it (the ``uni`` executor: the
    worker in this process too). vLLM reads the variable once, while the engine is built."""
    saved = os.environ.get(IN_PROCESS_ENV)
    os.environ[IN_PROCESS_ENV] = "0"
    try:
        yield {"distributed_executor_backend": "uni"}
    finally:
        if saved is None:
            os.environ.pop(IN_PROCESS_ENV, None)
        else:
            os.environ[IN_PROCESS_ENV] = saved
