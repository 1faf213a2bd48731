"""Stand-ins for the few vLLM names the Model Runner V2 adapters import, for a GPU machine
that has torch and Triton but not vLLM.

:func:`install` puts minimal ``vllm`` modules into ``sys.modules`` ONLY when vLLM is
not importable (or when ``force=True``, which the CPU tests use to check the stand-ins
where vLLM is installed). The adapters then import unchanged. The classes copy vLLM
0.32's ``vllm/v1/worker/gpu/sample/logits_processor/interface.py``: the same dataclass
fields and the same ``LogitsProcessor`` methods; ``SamplingParams`` keeps only
``extra_args``, the one field the adapters read. Nothing here is used when vLLM is there.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

MODULE = "vllm.v1.worker.gpu.sample.logits_processor"


@dataclass(frozen=True)
class LogitsProcRequestState:
    """vLLM 0.32's fields; the tensors are objects with a ``.gpu`` (and ``.np``) view."""

    device: Any
    max_num_reqs: int
    vocab_size: int
    all_token_ids: Any
    prompt_len: Any
    prefill_len: Any
    total_len: Any


@dataclass(frozen=True)
class LogitsContext:
    expanded_idx_mapping: Any
    idx_mapping: Any
    idx_mapping_np: Any
    expanded_local_pos: Any
    input_ids: Any
    pos: Any
    seq_lens_upper_bound_np: Any


class LogitsProcessor(ABC):
    """vLLM 0.32's Model Runner V2 logits-processor interface (same methods, same defaults)."""

    def __init__(self, vllm_config: Any, req_states: LogitsProcRequestState):  # noqa: B027
        pass

    @classmethod  # noqa: B027
    def validate_params(cls, sampling_params: Any) -> None:
        pass

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        return True

    def apply_staged_writes(self) -> None:  # noqa: B027
        pass

    @abstractmethod
    def apply(self, logits: Any, ctx: LogitsContext) -> Any:
        raise NotImplementedError


@dataclass
class SamplingParams:
    """Only what the adapters read: ``extra_args``."""

    extra_args: dict[str, Any] | None = field(default=None)


def vllm_available() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def install(*, force: bool = False) -> bool:
    """Install the stand-ins when vLLM is absent (or ``force``); True if installed."""
    if not force and vllm_available():
        return False
    names = ["vllm", "vllm.config", "vllm.v1", "vllm.v1.worker", "vllm.v1.worker.gpu"]
    names += ["vllm.v1.worker.gpu.sample", MODULE]
    for name in names:
        mod = types.ModuleType(name)
        mod.__doc__ = "thinkgate GPU-check stand-in (kernels/gpu_check/vllm_standin.py)"
        mod.__path__ = []  # a package, so submodules resolve from sys.modules
        sys.modules[name] = mod
    lp = sys.modules[MODULE]
    for cls in (LogitsContext, LogitsProcessor, LogitsProcRequestState):
        setattr(lp, cls.__name__, cls)
    sys.modules["vllm"].SamplingParams = SamplingParams  # type: ignore[attr-defined]
    sys.modules["vllm.config"].VllmConfig = object  # type: ignore[attr-defined]
    return True


def is_standin(cls: type) -> bool:
    """Whether ``cls`` derives from the stand-in ``LogitsProcessor``."""
    return issubclass(cls, LogitsProcessor)
