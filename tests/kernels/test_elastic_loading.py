"""Both adapters load through vLLM's own loaders by FQCN (what ``--logits-processors``
passes), each loader accepts only its interface, and admission validation refuses bad
``extra_args`` with a VLLMValidationError caused by our ValueError (HTTP 400)."""

from __future__ import annotations

import pytest
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError

from kernels.elastic import args as keys

V1_FQCN = "kernels.elastic.vllm_v1:ElasticLogitsProcessor"
V2_FQCN = "kernels.elastic.vllm_v2:ElasticLogitsProcessorV2"
BAD = SamplingParams(extra_args={keys.THINKING_BUDGET: "5", keys.THINK_END_ID: 4, keys.EOS_ID: 2})
GOOD = SamplingParams(extra_args={keys.THINKING_BUDGET: 5, keys.THINK_END_ID: 4, keys.EOS_ID: 2})


def test_v1_loader_by_fqcn_and_admission() -> None:
    from vllm.v1.sample.logits_processor import (
        _load_logitsprocs_by_fqcns,
        validate_logits_processors_parameters,
    )

    from kernels.elastic.vllm_v1 import ElasticLogitsProcessor

    assert _load_logitsprocs_by_fqcns([V1_FQCN]) == [ElasticLogitsProcessor]
    validate_logits_processors_parameters([V1_FQCN], GOOD)
    with pytest.raises(VLLMValidationError, match=keys.THINKING_BUDGET) as info:
        validate_logits_processors_parameters([V1_FQCN], BAD)
    assert isinstance(info.value.__cause__, ValueError)


def test_v2_loader_by_fqcn_and_admission() -> None:
    from vllm.v1.worker.gpu.sample.logits_processor import (
        build_custom_logits_processors_params_validator,
    )
    from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs_by_fqcns

    from kernels.elastic.vllm_v2 import ElasticLogitsProcessorV2

    assert _load_v2_logitsprocs_by_fqcns([V2_FQCN]) == [ElasticLogitsProcessorV2]
    validate = build_custom_logits_processors_params_validator([V2_FQCN])
    validate(GOOD)
    with pytest.raises(VLLMValidationError, match=keys.THINKING_BUDGET) as info:
        validate(BAD)
    assert isinstance(info.value.__cause__, ValueError)


def test_each_loader_rejects_the_other_interface() -> None:
    from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns
    from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs_by_fqcns

    with pytest.raises(ValueError, match="not a subclass"):
        _load_v2_logitsprocs_by_fqcns([V1_FQCN])
    with pytest.raises(ValueError, match="must be a subclass"):
        _load_logitsprocs_by_fqcns([V2_FQCN])
