"""vLLM general plugin: registers the budget-guidance wrapper architecture.

Entry point (pyproject): ``[project.entry-points."vllm.general_plugins"]
thinkgate_bg = "kernels.guidance.plugin:register"``. vLLM calls it in every process it starts
(frontend, engine core, workers). It only registers a lazy ``module:Class`` string, so
it imports nothing heavy and changes nothing for engines that do not select
:data:`ARCHITECTURE` through ``hf_overrides``.
"""

from __future__ import annotations

from typing import Final

ARCHITECTURE: Final = "BGQwen2ForCausalLM"
_TARGET: Final = "kernels.guidance.model:BGQwen2ForCausalLM"


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, _TARGET)


def hf_overrides() -> dict[str, list[str]]:
    """The ``hf_overrides`` that select the wrapper for a model directory."""
    return {"architectures": [ARCHITECTURE]}
