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


# The hf_overrides key naming where the predictor lives when it is not beside the model
# (a profile's, fitted by ``thinkgate fit`` on a workload): vLLM sets it on the model's
# config, where the wrapper reads it in every worker.
HOME_KEY: Final = "thinkgate_predictor_home"


def hf_overrides(home: str | None = None) -> dict[str, object]:
    """The ``hf_overrides`` that select the wrapper for a model directory, with the
    predictor in ``home/bg_predictor/`` (default: the model's own directory)."""
    overrides: dict[str, object] = {"architectures": [ARCHITECTURE]}
    if home is not None:
        overrides[HOME_KEY] = home
    return overrides
