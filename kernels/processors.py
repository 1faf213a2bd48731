"""Our vLLM logits processors by short name, one class per model-runner interface.

vLLM 0.32 has two processor interfaces and each runner's loader refuses the other's
classes: the V1 runner (CPU, or ``VLLM_USE_V2_MODEL_RUNNER=0``) and Model Runner V2
(the GPU default when Triton is present). Settings name processors by what they do
(``elastic``, ``guidance``); the engine picks the class for the runner it got.
"""

from __future__ import annotations

from typing import Final, Literal

Runner = Literal["v1", "v2"]

CLASSES: Final[dict[str, dict[Runner, str]]] = {
    "elastic": {
        "v1": "kernels.vllm_v1:ElasticLogitsProcessor",
        "v2": "kernels.vllm_v2:ElasticLogitsProcessorV2",
    },
    "confidence": {
        "v1": "kernels.confidence.vllm_v1:ConfidenceLogitsProcessor",
        "v2": "kernels.confidence.vllm_v2:ConfidenceLogitsProcessorV2",
    },
    "guidance": {
        "v1": "kernels.guidance_v1:BudgetGuidanceLogitsProcessor",
        "v2": "kernels.guidance_v2:BudgetGuidanceLogitsProcessorV2",
    },
}


# Loaded by default (the local engine, ``thinkgate replica``), in this order: confidence
# reads raw logits, so it runs before the processors that mask or steer them.
DEFAULT: Final[tuple[str, ...]] = ("confidence", "elastic", "guidance")


def spec_for(name_or_spec: str, runner: Runner) -> str:
    """``module:Class`` for a short name (``elastic``) or a spec given as is."""
    if ":" in name_or_spec:
        return name_or_spec
    try:
        return CLASSES[name_or_spec][runner]
    except KeyError:
        known = ", ".join(sorted(CLASSES))
        raise ValueError(
            f"unknown logits processor {name_or_spec!r}: a short name ({known}) or 'module:Class'"
        ) from None
