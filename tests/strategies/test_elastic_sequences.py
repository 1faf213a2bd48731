"""The elastic strategy on a model whose ``</think>`` is several tokens (no vLLM):
the plan carries the sequence, the two-pass fallback cuts and closes with it, and a
model without think delimiters or EOS is refused with what is really missing."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from test_reasoning_sequences import EOS, CharTokens

from core.base import StrategyRequest
from core.budget import Budget
from core.engine import GenerateRequest, Sample, SampleDelta, SamplingConfig
from core.errors import InvalidRequest
from engines.scripted import ScriptedEngine
from kernels.elastic import args as keys
from strategies.elastic_plan import plan, two_pass

TOKENS = CharTokens()
END = TOKENS.think_end_ids


def request(thinking: int, solution: int | None = None, n: int = 1) -> StrategyRequest:
    return StrategyRequest(
        request_id="r",
        prompt_token_ids=tuple(TOKENS.encode("q\n<think>")),
        thinking_open=True,
        n=n,
        sampling=SamplingConfig(),
        budget=Budget(thinking=thinking, solution=solution),
        stream=True,
    )


def test_plan_sends_the_sequence_and_leaves_room_for_it() -> None:
    engine = ScriptedEngine(lambda r: [], tokens=TOKENS, max_model_len=100)
    p = plan(request(5, solution=3), engine)
    assert p.think_end_ids == END
    assert p.sampling.extra_args[keys.THINK_END_IDS] == ",".join(map(str, END))
    assert keys.THINK_END_ID not in p.sampling.extra_args
    assert p.sampling.max_tokens == 5 + len(END) + 3
    parsed = keys.parse(p.sampling.extra_args)
    assert parsed is not None and parsed.think_end_ids == END
    # An unset t gets what the answer and the closing leave.
    room = 100 - len(request(0).prompt_token_ids)
    assert plan(replace(request(0), budget=Budget(solution=3)), engine).thinking == (
        room - len(END) - 3
    )


def test_missing_delimiters_or_eos_are_named() -> None:
    plain = CharTokens()
    plain.think_start_ids = plain.think_end_ids = ()
    with pytest.raises(InvalidRequest, match="without think delimiters"):
        plan(request(5), ScriptedEngine(lambda r: [], tokens=plain))
    no_eos = CharTokens(eos_token_ids=())
    with pytest.raises(InvalidRequest, match="has no EOS token"):
        plan(request(5), ScriptedEngine(lambda r: [], tokens=no_eos))


async def _collect(engine: ScriptedEngine, req: StrategyRequest) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    async for d in two_pass(engine, req, plan(req, engine)):
        assert isinstance(d, SampleDelta)
        out.setdefault(d.index, []).extend(d.token_ids)
    return out


@pytest.mark.parametrize(
    ("thought", "expected_thought"),
    [
        ("ab</think>LEFTOVER", "ab</think>"),  # natural closing: cut right after it
        ("abcdef", "abcdef</think>"),  # cut by t: the whole closing appended
        ("abc</thi", "abc</think>"),  # cut mid-closing: only the rest appended
    ],
)
def test_two_pass_closes_thinking_with_the_sequence(thought: str, expected_thought: str) -> None:
    def handler(r: GenerateRequest) -> list[Sample]:
        if r.request_id.endswith("-think"):
            assert r.sampling.stop_token_ids == ()  # a sequence is no stop token
            ids = tuple(TOKENS.encode(thought))[: r.sampling.max_tokens]
            return [Sample(index=0, token_ids=ids, finish_reason="length")]
        # The answer call continues from the closed thought.
        assert TOKENS.decode(r.prompt_token_ids).endswith(expected_thought)
        return [Sample(index=0, token_ids=(*TOKENS.encode("ok"), EOS), finish_reason="stop")]

    engine = ScriptedEngine(handler, tokens=TOKENS)
    out = asyncio.run(_collect(engine, request(len(thought), solution=4)))
    assert TOKENS.decode(out[0]) == expected_thought + "ok"
