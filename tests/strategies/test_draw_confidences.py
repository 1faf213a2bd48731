"""Token confidences from engine deltas into the pool's samples (``sampling.draw``), and
through elastic's two-pass fallback, which cuts and closes thoughts (no vLLM)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence

import pytest
from test_reasoning_sequences import EOS, CharTokens

from core.base import StrategyRequest
from core.budget import Budget
from core.engine import GenerateRequest, Sample, SampleDelta, SamplingConfig
from engines.scripted import ScriptedEngine
from strategies.elastic_plan import plan, two_pass
from strategies.pool import Draw, Pool, draw

TOKENS = CharTokens()


async def _replay(deltas: Sequence[SampleDelta]) -> AsyncGenerator[SampleDelta, None]:
    for d in deltas:
        yield d


async def _pool(n: int, deltas: AsyncGenerator[SampleDelta, None]) -> list[Sample]:
    pool = Pool(samples=[])
    source = Draw(n=n, deltas=deltas, plan=None, mode="plain", engine_requests=1)
    async for _ in draw(source, pool):
        pass
    return pool.samples


async def test_draw_joins_each_samples_delta_confidences() -> None:
    deltas = [
        SampleDelta(index=0, token_ids=(1, 2), confidences=(0.5, 1.0)),
        SampleDelta(index=1, token_ids=(3,)),  # asked for none
        SampleDelta(index=2, token_ids=(4,), confidences=(2.0,)),
        SampleDelta(index=0, token_ids=(5,), finish_reason="stop", confidences=(1.5,)),
        SampleDelta(index=1, token_ids=(), finish_reason="stop"),
        # A token the engine did not sample (no confidence) breaks the 1:1 alignment.
        SampleDelta(index=2, token_ids=(6,)),
        SampleDelta(index=2, token_ids=(7,), finish_reason="length", confidences=(3.0,)),
        SampleDelta(index=3, token_ids=(), finish_reason="stop", confidences=()),
    ]
    samples = await _pool(4, _replay(deltas))
    assert samples[0].token_ids == (1, 2, 5) and samples[0].confidences == (0.5, 1.0, 1.5)
    assert samples[1].confidences is None
    assert samples[2].token_ids == (4, 6, 7) and samples[2].confidences is None
    assert samples[3].confidences == ()


def _request(thinking: int) -> StrategyRequest:
    return StrategyRequest(
        request_id="r",
        prompt_token_ids=tuple(TOKENS.encode("q\n<think>")),
        thinking_open=True,
        n=1,
        sampling=SamplingConfig(top_logprobs=4),
        budget=Budget(thinking=thinking, solution=4),
        stream=True,
    )


@pytest.mark.parametrize(
    ("thought", "kept"),
    [
        ("ab</think>LEFTOVER", True),  # cut after the model's own closing: a prefix
        ("abcdef", False),  # closed by injecting </think>: tokens nobody sampled
    ],
)
async def test_two_pass_keeps_confidences_of_sampled_tokens_only(thought: str, kept: bool) -> None:
    def handler(r: GenerateRequest) -> list[Sample]:
        assert r.sampling.top_logprobs == 4  # both calls ask for them
        think = r.request_id.endswith("-think")
        text = thought if think else "ok"
        ids = (*TOKENS.encode(text)[: r.sampling.max_tokens], *(() if think else (EOS,)))
        base = 0.0 if think else 100.0
        conf = tuple(base + j for j in range(len(ids)))
        return [Sample(index=0, token_ids=ids, finish_reason="stop", confidences=conf)]

    engine = ScriptedEngine(handler, tokens=TOKENS)
    req = _request(len(thought))
    (sample,) = await _pool(1, two_pass(engine, req, plan(req, engine)))
    assert TOKENS.decode(sample.token_ids).endswith("</think>ok")
    if not kept:
        assert sample.confidences is None
        return
    closed = len(TOKENS.encode("ab</think>"))
    assert sample.confidences == (*map(float, range(closed)), 100.0, 101.0, 102.0)
