"""Our vLLM logits processors by short name, one class per model-runner interface.

vLLM 0.32 has two processor interfaces and each runner's loader refuses the other's
classes: the V1 runner (CPU, or ``VLLM_USE_V2_MODEL_RUNNER=0``) and Model Runner V2
(the GPU default when Triton is present). Settings name processors by what they do
(``elastic``, ``guidance``); the engine picks the class for the runner it got.
"""

from __future__ import annotations

from typing import Final, Literal

from kernels.confidence import args as conf_args
from kernels.elastic import args as elastic_args
from kernels.guidance import args as guidance_args

Runner = Literal["v1", "v2"]

CLASSES: Final[dict[str, dict[Runner, str]]] = {
    elastic_args.PROCESSOR_NAME: {
        "v1": "kernels.elastic.vllm_v1:ElasticLogitsProcessor",
        "v2": "kernels.elastic.vllm_v2:ElasticLogitsProcessorV2",
    },
    conf_args.PROCESSOR_NAME: {
        "v1": "kernels.confidence.vllm_v1:ConfidenceLogitsProcessor",
        "v2": "kernels.confidence.vllm_v2:ConfidenceLogitsProcessorV2",
    },
    guidance_args.PROCESSOR_NAME: {
        "v1": "kernels.guidance.vllm_v1:BudgetGuidanceLogitsProcessor",
        "v2": "kernels.guidance.vllm_v2:BudgetGuidanceLogitsProcessorV2",
    },
}


# Loaded by default (the local engine, ``thinkgate replica``), in this order: confidence
# reads raw logits, so it runs before the processors that mask or steer them.
DEFAULT: Final[tuple[str, ...]] = (
    conf_args.PROCESSOR_NAME,
    elastic_args.PROCESSOR_NAME,
    guidance_args.PROCESSOR_NAME,
)


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
