"""Per-token DeepConf confidences through the engine layer (no engine started): vLLM's
logprob containers read by ``LocalEngine``, its sampling params, and the scripted
engine's stream. The remote wire's are in ``test_remote_wire.py``."""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np
import pytest

from core.engine import GenerateRequest, Sample, SampleDelta, SamplingConfig
from core.errors import BackendError
from core.token_confidence import token_confidence
from engines.local.engine import LocalEngine
from engines.local.vllm_logprobs import client_logprobs, token_confidences
from engines.scripted import ScriptedEngine

K = 3
# Two engine steps (new ids, candidate ids, their logprobs, sampled ranks) of a request
# asking for top-3: per position the sampled token first (token 10 is also the top-1:
# it comes twice), then the top k by rank.
STEPS = [
    (
        [10, 11],
        [[10, 10, 12, 13], [11, 14, 11, 15]],
        [[-0.1, -0.1, -2.0, -3.0], [-0.5, -0.4, -0.5, -4.0]],
        [1, 2],
    ),
    ([20], [[20, 21, 22, 23]], [[-9.0, -0.2, -1.0, -2.0]], [7]),  # 20 is outside the top 3
]
EXPECTED = (
    token_confidence([-0.1, -2.0, -3.0], K),
    token_confidence([-0.4, -0.5, -4.0], K),
    token_confidence([-0.2, -1.0, -2.0], K),
)


def _request(**sampling: Any) -> GenerateRequest:
    return GenerateRequest(
        request_id="r", prompt_token_ids=(1, 2, 3), sampling=SamplingConfig(**sampling)
    )


def _outputs(kind_name: str, flat: bool) -> list[Any]:
    """The ``CompletionOutput``s vLLM's own output processor makes of ``STEPS``.

    Pins what ``LocalEngine`` relies on (internal vLLM API: if this breaks on an
    upgrade, re-check the logprobs contract before mending the test).
    """
    from vllm import RequestOutput, SamplingParams
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.outputs import LogprobsLists

    processor = OutputProcessor(None, log_stats=False)
    params = SamplingParams(
        logprobs=K,
        flat_logprobs=flat,
        output_kind=RequestOutputKind[kind_name],
        detokenize=False,
        max_tokens=10,
    )
    processor.add_request(
        EngineCoreRequest(
            request_id="r",
            external_req_id="r",
            prompt_token_ids=[1, 2],
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=time.time(),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
        ),
        None,
    )
    outputs: list[Any] = []
    for i, (ids, top_ids, values, ranks) in enumerate(STEPS):
        step = EngineCoreOutput(
            request_id="r",
            new_token_ids=list(ids),
            new_logprobs=LogprobsLists(np.array(top_ids), np.array(values), np.array(ranks)),
            finish_reason=FinishReason.LENGTH if i == len(STEPS) - 1 else None,
        )
        for out in processor.process_outputs([step]).request_outputs:
            assert isinstance(out, RequestOutput)
            outputs.extend(out.outputs)
    return outputs


@pytest.mark.parametrize("flat", [False, True], ids=["dicts", "flat"])
def test_delta_logprobs_are_the_new_tokens_only(flat: bool) -> None:
    outs = _outputs("DELTA", flat)
    assert [list(c.token_ids) for c in outs] == [[10, 11], [20]]
    assert type(outs[0].logprobs).__name__ == ("FlatLogprobs" if flat else "list")
    got = [token_confidences(c.logprobs, K, len(c.token_ids)) for c in outs]
    assert got[0] == pytest.approx(EXPECTED[:2]) and got[1] == pytest.approx(EXPECTED[2:])


@pytest.mark.parametrize("flat", [False, True], ids=["dicts", "flat"])
def test_final_only_logprobs_cover_every_token(flat: bool) -> None:
    (out,) = _outputs("FINAL_ONLY", flat)
    assert token_confidences(out.logprobs, K, len(out.token_ids)) == pytest.approx(EXPECTED)


@pytest.mark.parametrize("flat", [False, True], ids=["dicts", "flat"])
def test_the_clients_logprobs_are_each_tokens_own_and_its_best_alternatives(flat: bool) -> None:
    (out,) = _outputs("FINAL_ONLY", flat)
    got = client_logprobs(out.logprobs, 2, out.token_ids)
    flat_got = [(t.token_id, t.logprob, *(x for pair in t.top for x in pair)) for t in got]
    assert [x for row in flat_got for x in row] == pytest.approx(
        [10, -0.1, 10, -0.1, 12, -2.0]
        + [11, -0.5, 14, -0.4, 11, -0.5]
        + [20, -9.0, 21, -0.2, 22, -1.0],  # sampled outside the top 2
        abs=1e-6,
    )
    assert all(t.top == () for t in client_logprobs(out.logprobs, 0, out.token_ids))
    with pytest.raises(BackendError, match="for 3 of 2 tokens"):
        client_logprobs(out.logprobs, 2, out.token_ids[:2])


def test_missing_or_misaligned_logprobs_are_engine_faults() -> None:
    with pytest.raises(BackendError, match="no logprobs"):
        token_confidences(None, K, 2)
    with pytest.raises(BackendError, match="for 1 of 2 tokens"):
        token_confidences([{}], K, 2)
    with pytest.raises(BackendError, match="unknown type"):
        token_confidences((), K, 0)
    assert token_confidences([None], K, 1) == (0.0,)  # no candidates: no information


@pytest.mark.parametrize(
    ("sampling", "logprobs", "flat"),
    [
        ({}, None, False),
        ({"logprobs": True}, 0, False),
        ({"top_logprobs": 20}, 20, True),
        ({"top_logprobs": 5, "logprobs": True}, 5, True),
        ({"token_logprobs": 0}, 0, False),
        ({"token_logprobs": 7, "top_logprobs": 5}, 7, True),
        ({"token_logprobs": 2, "top_logprobs": 5}, 5, True),
    ],
)
def test_params_ask_vllm_for_the_top_k(sampling: dict[str, Any], logprobs: Any, flat: bool) -> None:
    from vllm.sampling_params import RequestOutputKind

    engine = LocalEngine(
        cast(Any, None),
        model_name="m",
        tokens=cast(Any, None),
        max_model_len=64,
        processors=frozenset(),
    )
    params = engine._params(_request(**sampling), RequestOutputKind.DELTA)
    assert params.logprobs == logprobs and params.flat_logprobs is flat


async def test_scripted_stream_passes_confidences_one_per_token(testbed_tokens: Any) -> None:
    samples = [
        Sample(index=0, token_ids=(5, 6, 7), finish_reason="stop", confidences=(0.5, 1.5, 2.5)),
        Sample(index=1, token_ids=(8,), finish_reason="length"),
        Sample(index=2, token_ids=(), finish_reason="stop", confidences=()),
    ]
    engine = ScriptedEngine(lambda r: samples, tokens=testbed_tokens)
    got: dict[int, list[SampleDelta]] = {}
    async for d in engine.stream(_request(n=3, top_logprobs=2)):
        got.setdefault(d.index, []).append(d)
    assert [(d.token_ids, d.confidences) for d in got[0]] == [
        ((5,), (0.5,)),
        ((6,), (1.5,)),
        ((7,), (2.5,)),
    ]
    assert [d.confidences for d in got[1]] == [None]
    assert [(d.token_ids, d.confidences, d.finish_reason) for d in got[2]] == [((), (), "stop")]


async def test_scripted_handler_with_misaligned_confidences_fails_loudly(
    testbed_tokens: Any,
) -> None:
    bad = [Sample(index=0, token_ids=(5, 6), finish_reason="stop", confidences=(1.0,))]
    engine = ScriptedEngine(lambda r: bad, tokens=testbed_tokens)
    with pytest.raises(ValueError, match="1 confidences for 2 tokens"):
        await engine.generate(_request())
