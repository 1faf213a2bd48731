"""``best-of-n`` with ``select: vote`` and ``adaptive``: the stop rule, its options, and the
rounds on a scripted engine and a scripted PRM (seeds continue the pool, one PRM call per
round over that round's samples, the cap, usage, progress, a client that leaves)."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest

import testbed
from core.base import Progress, Resources, Result, StrategyContext, StrategyRequest
from core.budget import Budget
from core.engine import GenerateRequest, Sample, SamplingConfig
from core.errors import InvalidRequest
from engines.scripted import ScriptedEngine
from engines.tokens import TokenizerTokens
from strategies.prm import RESOURCE_KEY as PRM_KEY
from strategies.prm import ProcessRewardModel
from strategies.reasoning import thinking_open_after
from strategies.sampling.adaptive_vote import AdaptiveStop, adaptive_stop, settled
from strategies.sampling.best_of_n import BestOfN
from strategies.search_options import DEFAULTS_KEY, SearchDefaults
from strategies.selection import build_classes
from tests.strategies.test_prm_scorer import NL, LinePrm

# The answer of the sample drawn with seed s (a request's child j gets seed + j), and the
# PRM's reward of its one line: what a seeded engine makes of a pool position.
LINES = {6: "1-5=6", 5: "1-5=5", 7: "1-5=7"}
TABLE = {"1-5=6": 0.9, "1-5=5": 0.3, "1-5=7": 0.2, "</think>": 1.0}


def _stop(**kw: Any) -> AdaptiveStop | None:
    request = StrategyRequest(
        request_id="r",
        prompt_token_ids=(1,),
        thinking_open=False,
        n=1,
        sampling=SamplingConfig(),
        budget=Budget(),
        stream=False,
        options=kw,
    )
    return adaptive_stop(request)


def test_the_leader_must_hold_the_share_and_the_weight() -> None:
    stop = AdaptiveStop(share=0.5, weight=0.5)
    # 6 holds 0.9 of 0.9 + 0.3 + 0.2 = 1.4 (0.64): settled.
    assert settled(build_classes(["6", "5", "7"], [0.9, 0.3, 0.2]), stop)
    # 6 holds 0.9 of 1.9 (0.47): not yet.
    assert not settled(build_classes(["6", "5", "7"], [0.9, 0.5, 0.5]), stop)
    # Everything agrees but the PRM trusts none of it: 0.4 < 0.5.
    assert not settled(build_classes(["6", "6"], [0.2, 0.2]), stop)
    # Unanswered samples are no class and weigh nothing; no answer at all never settles.
    assert settled(build_classes(["6", None], [0.6, 0.9]), stop)
    assert not settled(build_classes([None, None], [0.9, 0.9]), stop)
    assert not settled(build_classes(["6"], [0.0]), AdaptiveStop(weight=0.0))


def test_options_and_their_400s() -> None:
    assert _stop() is None and _stop(adaptive=False) is None
    assert _stop(adaptive=True) == AdaptiveStop()
    assert _stop(adaptive=True, adaptive_round=2, adaptive_share=1, adaptive_weight=0) == (
        AdaptiveStop(round=2, share=1.0, weight=0.0)
    )
    bad = [
        ({"adaptive": "yes"}, "adaptive"),
        ({"adaptive_round": 2}, "adaptive_round"),  # tuning without the flag
        ({"adaptive": True, "adaptive_round": 0}, "adaptive_round"),
        ({"adaptive": True, "adaptive_round": 1.5}, "adaptive_round"),
        ({"adaptive": True, "adaptive_share": 0}, "adaptive_share"),
        ({"adaptive": True, "adaptive_share": 1.5}, "adaptive_share"),
        ({"adaptive": True, "adaptive_weight": -1}, "adaptive_weight"),
    ]
    for options, param in bad:
        with pytest.raises(InvalidRequest) as err:
            _stop(**options)
        assert err.value.param == param, options


@pytest.fixture(scope="module")
def tokens() -> TokenizerTokens:
    return TokenizerTokens.load(str(testbed.model_path("base")))


class SeededEngine:
    """Child j of a request seeded s is the sample ``answers[s + j]`` (one line, then
    the answer); records each request's (seed, n)."""

    def __init__(self, tokens: TokenizerTokens, answers: list[int]) -> None:
        self.tokens = tokens
        self.answers = answers
        self.requests: list[tuple[int, int]] = []

    async def __call__(self, request: GenerateRequest) -> list[Sample]:
        seed, n = request.sampling.seed, request.sampling.n
        assert seed is not None
        self.requests.append((seed, n))
        out = []
        for j in range(n):
            a = self.answers[seed + j]
            ids = (*self.tokens.encode(f"{LINES[a]}\n</think>\\boxed{{{a}}}"),)
            out.append(
                Sample(
                    index=j, token_ids=(*ids, *self.tokens.eos_token_ids[:1]), finish_reason="stop"
                )
            )
        return out


def _ctx(
    tokens: TokenizerTokens, engine: SeededEngine, prm: LinePrm, samples: int, **options: Any
) -> StrategyContext:
    prompt = tuple(tokens.render_chat([{"role": "user", "content": "Compute 3+8-5 mod 10."}]))
    request = StrategyRequest(
        request_id="r",
        prompt_token_ids=prompt,
        thinking_open=thinking_open_after(prompt, tokens),
        n=1,
        sampling=SamplingConfig(seed=0),
        budget=Budget(samples=samples),
        stream=False,
        options={"scorer": "prm", "select": "vote", "adaptive": True, **options},
    )
    items: dict[str, object] = {
        DEFAULTS_KEY.name: SearchDefaults(step_delimiter="\n"),
        PRM_KEY.name: ProcessRewardModel(model=prm, step_tag_id=NL),
    }
    return StrategyContext(
        engine=ScriptedEngine(engine, tokens=tokens),
        request=request,
        resources=Resources(items=items),
    )


async def _run(ctx: StrategyContext) -> tuple[Result, list[dict[str, Any]]]:
    strategy = BestOfN()
    strategy.validate(ctx.request, ctx.engine)
    progress: list[dict[str, Any]] = []
    async for event in strategy.run(ctx):
        if isinstance(event, Progress):
            progress.append(dict(event.data))
        elif isinstance(event, Result):
            return event, progress
    raise AssertionError("no result")


async def test_a_settled_first_round_stops_the_draw(tokens: TokenizerTokens) -> None:
    engine = SeededEngine(tokens, [6, 6, 5, 6] + [7] * 12)
    prm = LinePrm(tokens, TABLE)
    ctx = _ctx(tokens, engine, prm, 16)
    result, progress = await _run(ctx)
    info = result.info
    assert engine.requests == [(0, 4)]
    assert info["samples"] == 4 and result.samples == 4
    assert info["adaptive"] == {
        "round": 4,
        "share": 0.5,
        "weight": 0.5,
        "cap": 16,
        "rounds": 1,
        "stopped": "settled",
        "leader_share": pytest.approx(2.7 / 3.0, abs=1e-6),
    }
    assert result.choices[0].info["answer"] == "6"
    assert len(prm.batches) == 1  # the round's samples in one call (equal ones scored once)
    assert result.usage.prompt_tokens == len(ctx.request.prompt_token_ids)
    assert result.usage.completion_tokens == sum(info["sample_tokens"])
    assert [p["samples_done"] for p in progress if "samples_done" in p] == [1, 2, 3, 4]
    assert progress[-1] == {
        "phase": "adaptive",
        "samples": 4,
        "leader_share": pytest.approx(0.9),
        "settled": True,
    }


async def test_rounds_continue_the_pool_up_to_the_cap(tokens: TokenizerTokens) -> None:
    # Never settles: 6 and 5 share the weight evenly (0.9 against 0.3 x 3).
    answers = [6, 5, 5, 5, 6, 5, 5, 5, 6, 5]
    engine = SeededEngine(tokens, answers)
    prm = LinePrm(tokens, TABLE)
    ctx = _ctx(tokens, engine, prm, 10, adaptive_share=0.6)
    result, progress = await _run(ctx)
    info = result.info
    # Seeds continue where the last round stopped; the last round is what the cap leaves.
    assert engine.requests == [(0, 4), (4, 4), (8, 2)]
    assert info["sample_answers"] == [str(a) for a in answers]
    assert info["adaptive"]["rounds"] == 3 and info["adaptive"]["stopped"] == "cap"
    assert info["engine_requests"] == 3 and info["samples"] == 10
    # One PRM call per round, over that round's samples only (equal ones scored once).
    assert [len(b) for b in prm.batches] == [2, 2, 2]
    assert result.usage.prompt_tokens == 3 * len(ctx.request.prompt_token_ids)
    assert result.usage.completion_tokens == sum(info["sample_tokens"])
    # 6 weighs 2.7 against 5's 2.1: the weighted vote, not the count (7 to 3), decides.
    assert result.choices[0].info["answer"] == "6"
    done = [p["samples_done"] for p in progress if "samples_done" in p]
    assert done == list(range(1, 11))
    assert [p["samples"] for p in progress if p.get("phase") == "adaptive"] == [4, 8, 10]


async def test_a_client_that_leaves_starts_no_further_round(tokens: TokenizerTokens) -> None:
    engine = SeededEngine(tokens, [6, 5, 5, 5] * 4)
    ctx = _ctx(tokens, engine, LinePrm(tokens, TABLE), 16, adaptive_share=0.9)
    strategy = BestOfN()
    gen: AsyncGenerator[Any, None] = strategy.run(ctx)
    async for event in gen:
        if isinstance(event, Progress) and event.data.get("phase") == "adaptive":
            break
    await gen.aclose()
    assert engine.requests == [(0, 4)]


async def test_adaptive_needs_the_weighted_vote(tokens: TokenizerTokens) -> None:
    engine = SeededEngine(tokens, [6] * 4)
    ctx = _ctx(tokens, engine, LinePrm(tokens, TABLE), 4, select="best")
    with pytest.raises(InvalidRequest) as err:
        BestOfN().validate(ctx.request, ctx.engine)
    assert err.value.param == "adaptive"
