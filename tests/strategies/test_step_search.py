"""Beam search, particle filtering and DVTS on a scripted engine and a scripted PRM.

The engine writes testbed-style thinking, one line per call (the step delimiter, a
newline, is a stop token), right or wrong by the sample's index, then closes its
thinking after ``LINES`` lines and answers; the PRM scores a line by exact arithmetic
(0.9 right, 0.1 wrong), as the trained one is meant to. The whole path through vLLM and
the trained PRM is tested end to end in tests/server/test_step_search_api.py.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from core.base import (
    Progress,
    Resources,
    Result,
    StrategyContext,
    StrategyRequest,
)
from core.budget import Budget
from core.engine import GenerateRequest, Sample, SamplingConfig, StructuredOutput, TokenLogprob
from core.errors import BackendUnavailable, InvalidBudget, InvalidRequest
from engines.scripted import ScriptedEngine
from strategies.prm import RESOURCE_KEY as PRM_KEY
from strategies.prm import ProcessRewardModel
from strategies.reasoning import thinking_open_after
from strategies.search.beam import BeamSearch
from strategies.search.dvts import Dvts
from strategies.search.particle_filtering import ParticleFiltering, change, resample, weights
from strategies.search.step_rejection import StepRejection
from strategies.search.step_search import SearchState, StepSearch
from strategies.search_options import DEFAULTS_KEY, SearchDefaults, search_options
from testbed.traces import line_is_correct

QUESTION = "Compute 3+8-5+7 mod 10."
RIGHT = ["3+8=1", "1-5=6", "6+7=3"]  # the true running values
LINES = len(RIGHT)
LINE_LOGPROB = -0.05  # what the scripted model's right lines' tokens get
WRONG_LINE_LOGPROB = -2.0


def wrong(line: str, j: int) -> str:
    """A wrong version of ``line``: its result digit moved by 1 + j % 8."""
    head, _, digit = line.partition("=")
    return f"{head}={(int(digit) + 1 + j % 8) % 10}"


class World:
    """The scripted model: call k of a path writes line k (right when ``right(j)`` for
    the sample index j), closes thinking after LINES lines, then answers from the last
    value its lines reached. Counts what it generated and what was cancelled."""

    def __init__(
        self,
        tokens: Any,
        right: Any = lambda j: j % 2 == 0,
        lines: Any = lambda j: LINES,
        answer: Any = lambda value, j: f"\n\\boxed{{{value}}}",
    ) -> None:
        self.tokens = tokens
        self.right = right
        self.lines = lines  # how many lines sample j writes before it closes its thinking
        self.answer = answer  # the answer text of sample j after thinking that reached value
        self.requests: list[GenerateRequest] = []
        self.generated = 0
        self.cancelled = 0
        self.hold: asyncio.Event | None = None

    async def __call__(self, request: GenerateRequest) -> Sequence[Sample]:
        if self.hold is not None:
            try:
                await self.hold.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        self.requests.append(request)
        t = self.tokens
        text = t.decode(request.prompt_token_ids)
        thinking = text.split("assistant\n", 1)[1]
        out = []
        for j in range(request.sampling.n):
            if t.think_end_id in request.prompt_token_ids:
                value = _last_value(thinking)
                ids = (*t.encode(self.answer(value, j)), t.eos_token_ids[0])
                limit = request.sampling.max_tokens
                finish = "stop"
                if limit is not None and len(ids) > limit:
                    ids, finish = ids[:limit], "length"
                out.append(Sample(index=j, token_ids=ids, finish_reason=finish))
                continue
            done = [ln for ln in thinking.split("\n") if ln]
            if len(done) >= self.lines(j):
                ids = (t.think_end_id,)
                out.append(Sample(index=j, token_ids=ids, finish_reason="stop", stop_reason=4))
                continue
            right = self.right(j)
            line = RIGHT[len(done)] if right else wrong(RIGHT[len(done)], j)
            ids = tuple(t.encode(line + "\n"))
            limit = request.sampling.max_tokens
            if limit is not None and len(ids) > limit:
                sample = Sample(index=j, token_ids=ids[:limit], finish_reason="length")
            else:
                sample = Sample(index=j, token_ids=ids, finish_reason="stop", stop_reason=47)
            if request.sampling.token_logprobs is not None:
                # The model is sure of its right lines and unsure of its wrong ones.
                lp = LINE_LOGPROB if right else WRONG_LINE_LOGPROB
                sample = replace(
                    sample, logprobs=tuple(TokenLogprob(i, lp) for i in sample.token_ids)
                )
            out.append(sample)
        self.generated += sum(len(s.token_ids) for s in out)
        return out


def _last_value(thinking: str) -> str:
    lines = [ln for ln in thinking.split("\n") if "=" in ln]
    return lines[-1].rsplit("=", 1)[1][:1] if lines else "0"


class ArithmeticPrm:
    """A scripted PRM backend: at each newline, 0.9 when the line before it is true
    arithmetic, else 0.1; at the tag after ``</think>``, 0.9 when the thinking wrote all
    LINES lines right (it reached the answer). Records every batch it was given."""

    def __init__(self, tokens: Any) -> None:
        self.tokens = tokens
        self.batches: list[int] = []

    async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        self.batches.append(len(sequences))
        out = []
        for seq in sequences:
            rewards: list[float] = []
            line: list[int] = []
            right = 0
            for tok in seq:
                if tok == 47 and self.tokens.think_end_id in line:
                    rewards.append(0.9 if right == LINES else 0.1)
                    line = []
                elif tok == 47:
                    ok = line_is_correct(self.tokens.decode(line))
                    right += ok
                    rewards.append(0.9 if ok else 0.1)
                    line = []
                else:
                    line.append(tok)
            out.append(rewards)
        return out


class ConstantPrm:
    async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        return [[0.5] * sum(1 for t in s if t == 47) for s in sequences]


def _ctx(
    tokens: Any,
    world: World,
    *,
    samples: int,
    prm: Any = None,
    options: dict[str, Any] | None = None,
    thinking: int | None = None,
    solution: int | None = None,
    seed: int | None = 0,
    structured: StructuredOutput | None = None,
    prm_max_len: int | None = None,
) -> StrategyContext:
    prompt = tuple(tokens.render_chat([{"role": "user", "content": QUESTION}]))
    request = StrategyRequest(
        request_id="r",
        prompt_token_ids=prompt,
        thinking_open=thinking_open_after(prompt, tokens),
        n=1,
        sampling=SamplingConfig(seed=seed, structured=structured),
        budget=Budget(samples=samples, thinking=thinking, solution=solution),
        stream=False,
        options=options or {},
    )
    items: dict[str, object] = {DEFAULTS_KEY.name: SearchDefaults(step_delimiter="\n")}
    if prm is not None:
        items[PRM_KEY.name] = ProcessRewardModel(model=prm, step_tag_id=47, max_len=prm_max_len)
    engine = ScriptedEngine(world, tokens=tokens)
    return StrategyContext(engine=engine, request=request, resources=Resources(items=items))


async def _run(strategy: StepSearch, ctx: StrategyContext) -> tuple[list[Progress], Result]:
    strategy.validate(ctx.request, ctx.engine)
    progress: list[Progress] = []
    gen: AsyncGenerator[Any, None] = strategy.run(ctx)
    async for event in gen:
        if isinstance(event, Result):
            return progress, event
        progress.append(event)
    raise AssertionError("no result")


async def test_beam_search_keeps_the_right_steps(testbed_tokens: Any) -> None:
    world = World(testbed_tokens)
    prm = ArithmeticPrm(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=2, prm=prm, options={"expansions": 2})
    progress, result = await _run(BeamSearch(), ctx)
    choice = result.choices[0]
    assert choice.reasoning == "".join(line + "\n" for line in RIGHT)
    assert choice.content == "\n\\boxed{3}"
    info = result.info
    # 2 beams x 2 candidates every step; the lines' 3 steps, then the closing step.
    assert info["candidates_per_step"] == [4, 4, 4, 4]
    assert info["steps"] == 4 and len(progress) == 4
    # A reward per line, and one for the end of thinking (it reached the answer).
    assert info["chosen_step_rewards"] == [0.9, 0.9, 0.9, 0.9]
    # One PRM call per step, all candidates batched in it, a path written twice sent
    # once (4 candidates a step; the last step's four are one closing).
    assert prm.batches == [3, 3, 3, 1]
    assert info["prm_calls"] == 4
    # Identical beams share one engine request (the root, and the two right lines).
    first = ctx.engine.calls[0]  # type: ignore[attr-defined]
    assert first.sampling.n == 4 and first.sampling.stop_token_ids == (47, 4)
    # Each step of every beam is one submission (a remote engine's one call), then the
    # answers: one per distinct finished path.
    batches = ctx.engine.batches  # type: ignore[attr-defined]
    assert len(batches) == info["steps"] + 1 and sum(batches) == len(ctx.engine.calls)  # type: ignore[attr-defined]
    # Usage: every generated token, pruned candidates and the answer included.
    assert result.usage.completion_tokens == world.generated
    assert sum(info["tokens_per_step"]) + info["answer_tokens"] == world.generated
    assert result.usage.prompt_tokens == len(ctx.request.prompt_token_ids)
    answer = len(testbed_tokens.encode("\n\\boxed{3}")) + 1
    closing = 4  # the four candidates that closed the thinking, one token each
    assert result.usage.reasoning_tokens == world.generated - answer - closing


async def test_beam_search_with_a_constant_prm_is_independent_samples(
    testbed_tokens: Any,
) -> None:
    """M = 1 and a constant PRM: every beam goes on, none is pruned."""
    world = World(testbed_tokens, right=lambda j: True)
    ctx = _ctx(testbed_tokens, world, samples=3, prm=ConstantPrm(), options={"expansions": 1})
    _, result = await _run(BeamSearch(), ctx)
    assert result.info["candidates_per_step"] == [3, 3, 3, 3]
    assert result.info["survivors_per_step"] == [3, 3, 3, 0]
    assert result.info["complete_paths"] == 3


async def test_the_generators_confidence_weighs_steps_when_asked(testbed_tokens: Any) -> None:
    """A PRM that cannot tell right from wrong, and the option confidence: the model's
    own logprobs of each step (asked of the engine with the step) keep the right lines."""
    world = World(testbed_tokens)
    options = {"expansions": 2, "confidence": 1.0}
    ctx = _ctx(testbed_tokens, world, samples=2, prm=ConstantPrm(), options=options)
    _, result = await _run(BeamSearch(), ctx)
    assert result.choices[0].reasoning == "".join(line + "\n" for line in RIGHT)
    assert result.info["confidence"] == 1.0
    # Each line's reward: the PRM's 0.5 times exp(alpha * its tokens' mean logprob).
    rewards = result.info["chosen_step_rewards"]
    assert rewards[:LINES] == pytest.approx([0.5 * math.exp(LINE_LOGPROB)] * LINES, rel=1e-5)
    steps = [r for r in world.requests if testbed_tokens.think_end_id not in r.prompt_token_ids]
    assert all(r.sampling.token_logprobs == 0 for r in steps)
    # Without the option the steps ask for no logprobs, and the constant PRM keeps the
    # first candidates whatever they wrote.
    world = World(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=2, prm=ConstantPrm(), options={"expansions": 2})
    await _run(BeamSearch(), ctx)
    assert all(r.sampling.token_logprobs is None for r in world.requests)


async def test_dvts_keeps_each_subtree_greedy(testbed_tokens: Any) -> None:
    world = World(testbed_tokens)
    prm = ArithmeticPrm(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, prm=prm, options={"expansions": 2})
    _, result = await _run(Dvts(), ctx)
    assert result.info["subtrees"] == 2
    assert result.info["candidates_per_step"] == [4, 4, 4, 4]
    assert result.info["survivors_per_step"] == [2, 2, 2, 0]
    assert result.choices[0].content == "\n\\boxed{3}"
    assert result.usage.completion_tokens == world.generated


def test_dvts_needs_samples_a_multiple_of_expansions(testbed_tokens: Any) -> None:
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=6, options={"expansions": 4})
    with pytest.raises(InvalidBudget):
        Dvts().validate(ctx.request, ctx.engine)


async def test_particle_filtering_resamples_towards_right_steps(testbed_tokens: Any) -> None:
    world = World(testbed_tokens)
    prm = ArithmeticPrm(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, prm=prm)
    _, result = await _run(ParticleFiltering(), ctx)
    assert result.info["particles"] == 4
    assert result.info["candidates_per_step"][0] == 4
    assert result.choices[0].content == "\n\\boxed{3}"
    assert result.usage.completion_tokens == world.generated
    # Resampled duplicates share engine requests: fewer requests than particles.
    assert result.info["engine_requests"] < 4 * result.info["steps"]


@pytest.mark.parametrize(
    ("strategy", "samples", "seed"), [(ParticleFiltering, 6, 7), (StepRejection, 5, 3)]
)
async def test_a_seeded_search_is_reproducible(
    testbed_tokens: Any, strategy: type[StepSearch], samples: int, seed: int
) -> None:
    outs = []
    for _ in range(2):
        world = World(testbed_tokens, right=lambda j: j % 3 != 1)
        prm = ArithmeticPrm(testbed_tokens)
        ctx = _ctx(testbed_tokens, world, samples=samples, prm=prm, seed=seed)
        _, result = await _run(strategy(), ctx)
        info = result.info
        seeds = [r.sampling.seed for r in world.requests]
        outs.append(
            (info["candidates_per_step"], info["survivors_per_step"], info["path_scores"], seeds)
        )
    assert outs[0] == outs[1]
    # Every engine request (a redraw too) has a seed of its own.
    assert len(set(outs[0][3])) == len(outs[0][3])


def test_resampling_properties() -> None:
    assert weights([0.3, 0.3, 0.3], 1.0) == pytest.approx([1 / 3] * 3)  # constant: uniform
    assert weights([0.2, 0.9, 0.9], 0.0) == [0.0, 1.0, 0.0]  # T = 0: greedy, first best
    w = weights([0.9, 0.1], 1.0)
    assert w[0] == pytest.approx(81 / 82, rel=1e-3)  # softmax of logits: odds 9 / (1/9)
    from strategies.search.paths import Path

    particles = [Path(ids=(i,), rewards=(r,)) for i, r in enumerate([0.9, 0.1, 0.5])]
    drawn = resample(particles, 1.0, random.Random(0))
    assert len(drawn) == 3 and all(p in particles for p in drawn)  # nothing new
    assert resample(particles, 1.0, random.Random(0)) == drawn  # seeded: the same draw
    greedy = resample(particles, 0.0, random.Random(1))
    assert greedy == [particles[0]] * 3
    # Systematic resampling keeps every particle once under equal weights (no drift);
    # multinomial draws independently (seeded: reproducible).
    even = [Path(ids=(i,), rewards=(0.5,)) for i in range(8)]
    for seed in range(5):
        assert resample(even, 1.0, random.Random(seed)) == even
    drawn = resample(even, 1.0, random.Random(3), "multinomial")
    assert drawn == resample(even, 1.0, random.Random(3), "multinomial")
    assert len(set(drawn)) < 8  # with this seed, independent draws lost some
    # Systematic keeps a particle of weight w floor(Nw) or ceil(Nw) times.
    w = weights([0.9, 0.1, 0.5], 1.0)
    counts = [resample(particles, 1.0, random.Random(s)).count(particles[0]) for s in range(20)]
    assert all(int(3 * w[0]) <= c <= int(3 * w[0]) + 1 for c in counts)


def test_ratio_weights_follow_the_change_of_the_reward(testbed_tokens: Any) -> None:
    from strategies.search.paths import Path

    assert change(Path()) == 0.0
    assert change(Path(ids=(1,), rewards=(0.9,))) == pytest.approx(math.log(0.9))
    assert change(Path(ids=(1,), rewards=(0.9, 0.45))) == pytest.approx(math.log(0.5))
    # Two particles whose rewards stood still: latest weights copy the higher (odds 9
    # against 3/7), ratio weights keep both once; one whose reward fell is dropped.
    low = Path(ids=(1,), rewards=(0.3, 0.3))
    high = Path(ids=(2,), rewards=(0.9, 0.9))
    fell = Path(ids=(3,), rewards=(0.9, 0.009))  # a hundredfold fall
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=2, options={"weights": "ratio"})
    ratio = search_options(ctx.request, SearchDefaults())
    latest = replace(ratio, weights="latest")
    pf = ParticleFiltering()
    children = [[low], [high]]
    for seed in range(5):
        by_latest = pf.advance(SearchState(live=()), children, 2, latest, random.Random(seed))
        by_ratio = pf.advance(SearchState(live=()), children, 2, ratio, random.Random(seed))
        assert by_latest.live == (high, high)
        assert by_ratio.live == (low, high)
        dropped = pf.advance(SearchState(live=()), [[low], [fell]], 2, ratio, random.Random(seed))
        assert dropped.live == (low, low)
    # A particle finished in an earlier round weighs as unchanged (0): beside a live one
    # whose step kept its reward both stay; beside one whose step raised it, it is dropped.
    done = Path(ids=(4,), rewards=(0.2,), state="closed")
    rose = Path(ids=(5,), rewards=(0.01, 0.9))
    before = SearchState(live=(), complete=(done,))
    kept = pf.advance(before, [[low]], 2, ratio, random.Random(0))
    assert (kept.live, kept.complete) == ((low,), (done,))
    gone = pf.advance(before, [[rose]], 2, ratio, random.Random(0))
    assert (gone.live, gone.complete) == ((rose, rose), ())
    assert pf.trace(2, ratio)["weights"] == "ratio"


async def test_thinking_budget_caps_every_path(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=lambda j: True)
    ctx = _ctx(testbed_tokens, world, samples=2, prm=ArithmeticPrm(testbed_tokens), thinking=9)
    _, result = await _run(BeamSearch(), ctx)
    for call in ctx.engine.calls:  # type: ignore[attr-defined]
        used = len(call.prompt_token_ids) - len(ctx.request.prompt_token_ids)
        if testbed_tokens.think_end_id not in call.prompt_token_ids:
            assert used + (call.sampling.max_tokens or 0) <= 9
    choice = result.choices[0]
    assert len(testbed_tokens.encode(choice.reasoning)) <= 9
    assert choice.budget_cut == ("thinking",)
    assert result.info["forced_paths"] >= 1
    assert "boxed" in choice.content


class LongestPrm(ArithmeticPrm):
    """Records the longest sequence it was asked to read."""

    longest = 0

    async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        self.longest = max([self.longest, *(len(s) for s in sequences)])
        return await super().step_rewards(sequences)


@pytest.mark.parametrize("strategy", [BeamSearch(), ParticleFiltering(), StepRejection()])
async def test_paths_stop_where_the_prms_context_ends(
    testbed_tokens: Any, strategy: StepSearch
) -> None:
    """A PRM that reads fewer positions than the generator serves (the default server's
    512-position PRM beside a 65,536-token generator): paths end at the PRM's room, with
    their answer, instead of failing the request mid-search."""
    prompt = len(testbed_tokens.render_chat([{"role": "user", "content": QUESTION}]))
    prm = LongestPrm(testbed_tokens)
    world = World(testbed_tokens, right=lambda j: True)
    ctx = _ctx(testbed_tokens, world, samples=2, prm=prm, prm_max_len=prompt + 12)
    _, result = await _run(strategy, ctx)
    assert 0 < prm.longest <= prompt + 12
    assert result.choices[0].content
    assert len(testbed_tokens.encode(result.choices[0].reasoning)) < 12


async def test_solution_budget_cuts_the_answer(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=lambda j: True)
    ctx = _ctx(testbed_tokens, world, samples=1, prm=ArithmeticPrm(testbed_tokens), solution=3)
    _, result = await _run(BeamSearch(), ctx)
    choice = result.choices[0]
    assert choice.finish_reason == "length" and choice.budget_cut == ("solution",)
    assert len(testbed_tokens.encode(choice.content)) == 3


async def test_max_steps_ends_the_search(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=lambda j: True)
    ctx = _ctx(
        testbed_tokens,
        world,
        samples=2,
        prm=ArithmeticPrm(testbed_tokens),
        options={"max_steps": 2, "expansions": 1},
    )
    _, result = await _run(BeamSearch(), ctx)
    assert result.info["steps"] == 2
    assert result.info["forced_paths"] == 2
    choice = result.choices[0]
    assert choice.reasoning == "".join(line + "\n" for line in RIGHT[:2])
    assert choice.content == "\n\\boxed{6}"  # answered from where it stopped


async def test_vote_selects_the_weighted_majority(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=lambda j: j != 1)
    ctx = _ctx(
        testbed_tokens,
        world,
        samples=3,
        prm=ArithmeticPrm(testbed_tokens),
        options={"select": "vote", "expansions": 1},
    )
    _, result = await _run(BeamSearch(), ctx)
    info = result.info
    assert info["select"] == "vote"
    assert sorted(a or "" for a in info["path_answers"]) == ["3", "3", "3"] or any(
        c["selected"] and c["answer"] == "3" for c in info["classes"]
    )
    assert result.choices[0].content == "\n\\boxed{3}"


@pytest.mark.parametrize("strategy", [BeamSearch(), ParticleFiltering(), Dvts()])
async def test_response_format_holds_the_answer_not_the_steps(
    testbed_tokens: Any, strategy: StepSearch
) -> None:
    # Answers as JSON in two spellings of one value, and as 3.0 (another value): the
    # vote compares canonical JSON exactly, never as mathematics.
    spellings = itertools.cycle(['{"answer": 3}', '{"answer": 3.0}', '{ "answer":3 }'])
    world = World(testbed_tokens, answer=lambda value, j: next(spellings))
    fmt = StructuredOutput(kind="json_object")
    ctx = _ctx(
        testbed_tokens,
        world,
        samples=6,  # DVTS: three subtrees of two
        prm=ConstantPrm(),
        options={"select": "vote", "expansions": 2 if isinstance(strategy, Dvts) else 1},
        structured=fmt,
    )
    _, result = await _run(strategy, ctx)
    answers = [r for r in world.requests if testbed_tokens.think_end_id in r.prompt_token_ids]
    steps = [r for r in world.requests if r not in answers]
    assert answers and steps
    assert all(r.sampling.structured == fmt for r in answers)
    assert all(r.sampling.structured is None for r in steps)  # thinking stays free
    classes = {c["answer"]: c["count"] for c in result.info["classes"]}
    assert '{"answer":3}' in classes and set(classes) <= {'{"answer":3}', '{"answer":3.0}'}
    if not isinstance(strategy, Dvts):  # its greedy subtrees agree under a constant PRM
        assert set(classes) == {'{"answer":3}', '{"answer":3.0}'}, classes
    assert sum(classes.values()) == len(result.info["path_answers"])  # every path voted
    assert result.choices[0].info["answer"] in classes


async def test_with_tools_offered_paths_vote_on_their_calls(testbed_tokens: Any) -> None:
    # The same call in two key orders is one vote; the answer returned is a call.
    calls = itertools.cycle(
        [
            '<tool_call>{"name": "calculator", "arguments": {"expression": "3+8", "modulo": 10}}'
            "</tool_call>",
            '<tool_call>{"arguments": {"modulo": 10, "expression": "3+8"}, "name": "calculator"}'
            "</tool_call>",
        ]
    )
    world = World(testbed_tokens, answer=lambda value, j: next(calls))
    ctx = _ctx(testbed_tokens, world, samples=4, prm=ConstantPrm(), options={"expansions": 1})
    ctx = replace(ctx, request=replace(ctx.request, tools=True))
    _, result = await _run(BeamSearch(), ctx)
    (only,) = result.info["classes"]
    assert only["answer"].startswith("tool_calls:") and only["count"] == 4
    assert result.choices[0].content.startswith("<tool_call>")


def test_response_format_needs_a_model_that_thinks(testbed_tokens: Any) -> None:
    ctx = _ctx(
        testbed_tokens,
        World(testbed_tokens),
        samples=2,
        structured=StructuredOutput(kind="json_object"),
    )
    no_thinking = ScriptedEngine(World(testbed_tokens), tokens=_NoThinking(testbed_tokens))
    with pytest.raises(InvalidRequest) as info:
        BeamSearch().validate(ctx.request, no_thinking)
    assert info.value.param == "response_format"


class _NoThinking:
    """The testbed's tokens, as a model without think strings would have them."""

    def __init__(self, tokens: Any) -> None:
        self._tokens = tokens
        self.think_end_ids: tuple[int, ...] = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokens, name)


async def test_client_gone_aborts_every_path(testbed_tokens: Any) -> None:
    world = World(testbed_tokens)
    world.hold = asyncio.Event()
    ctx = _ctx(
        testbed_tokens,
        world,
        samples=4,
        prm=ArithmeticPrm(testbed_tokens),
        options={"expansions": 2},
    )
    consumer = asyncio.ensure_future(_run(BeamSearch(), ctx))
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(ctx.engine.calls) >= 1  # type: ignore[attr-defined]
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert world.cancelled == len(ctx.engine.calls)  # type: ignore[attr-defined]


async def test_an_engine_error_in_a_step_is_raised_as_itself(testbed_tokens: Any) -> None:
    """Not wrapped in the exception group of the step's concurrent calls: the error
    handler maps it (a 503 stays a 503, not an unexpected 500)."""
    world = World(testbed_tokens)

    async def failing(request: GenerateRequest) -> Sequence[Sample]:
        if len(world.requests) >= 2:
            raise BackendUnavailable("the engine died")
        return await world(request)

    ctx = _ctx(testbed_tokens, world, samples=2, prm=ArithmeticPrm(testbed_tokens))
    ctx = replace(ctx, engine=ScriptedEngine(failing, tokens=testbed_tokens))
    with pytest.raises(BackendUnavailable, match="the engine died"):
        await _run(BeamSearch(), ctx)


async def test_without_a_prm_it_is_a_503(testbed_tokens: Any) -> None:
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=2)
    with pytest.raises(BackendUnavailable) as err:
        await _run(BeamSearch(), ctx)
    assert err.value.code == "resource_unavailable" and "--prm-model" in err.value.message
    assert ctx.engine.calls == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"expansions": 0}, "expansions"),
        ({"expansions": True}, "expansions"),
        ({"aggregate": "mean"}, "aggregate"),
        ({"select": "all"}, "select"),
        ({"max_steps": "3"}, "max_steps"),
        ({"step_delimiter": ""}, "step_delimiter"),
        ({"resample_temperature": -1}, "resample_temperature"),
        ({"resampling": "stratified"}, "resampling"),
        ({"weights": "product"}, "weights"),
        ({"confidence": -1}, "confidence"),
        ({"confidence": "high"}, "confidence"),
        ({"accept": 1.5}, "accept"),
        ({"retries": -1}, "retries"),
    ],
)
def test_bad_options_are_400s_naming_the_field(
    testbed_tokens: Any, options: dict[str, Any], param: str
) -> None:
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=2, options=options)
    with pytest.raises(InvalidRequest) as err:
        ParticleFiltering().validate(ctx.request, ctx.engine)
    assert err.value.param == param


async def test_max_tokens_caps_each_path(testbed_tokens: Any) -> None:
    """The client's max_tokens bounds every path, thinking and answer together."""
    world = World(testbed_tokens, right=lambda j: True)
    ctx = _ctx(testbed_tokens, world, samples=2, prm=ArithmeticPrm(testbed_tokens))
    ctx = StrategyContext(
        engine=ctx.engine,
        request=replace(ctx.request, sampling=SamplingConfig(seed=0, max_tokens=15)),
        resources=ctx.resources,
    )
    _, result = await _run(BeamSearch(), ctx)
    prompt = len(ctx.request.prompt_token_ids)
    for call in ctx.engine.calls:  # type: ignore[attr-defined]
        assert len(call.prompt_token_ids) - prompt + (call.sampling.max_tokens or 0) <= 15
    choice = result.choices[0]
    assert choice.finish_reason == "length"


async def test_a_path_that_closes_early_is_judged_on_its_end(testbed_tokens: Any) -> None:
    """Right lines that stop before the question's last operation: the PRM's reward at
    the end of thinking (0.1 here) keeps that path from winning."""
    world = World(testbed_tokens, right=lambda j: True, lines=lambda j: 2 if j % 2 else LINES)
    ctx = _ctx(
        testbed_tokens,
        world,
        samples=2,
        prm=ArithmeticPrm(testbed_tokens),
        options={"expansions": 2},
    )
    _, result = await _run(BeamSearch(), ctx)
    assert result.choices[0].reasoning == "".join(line + "\n" for line in RIGHT)
    assert result.info["chosen_step_rewards"][-1] == 0.9
    assert 0.1 in result.info["path_scores"]  # an early closer finished, and lost


async def test_step_rejection_redraws_a_rejected_step(testbed_tokens: Any) -> None:
    """Sample j of a request writes wrong lines when j is odd: the second path's wrong
    line is rejected and drawn again from the same path (alone now: j = 0, right), so
    both paths finish right, every line, and no path copies another."""
    world = World(testbed_tokens)
    prm = ArithmeticPrm(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=2, prm=prm)
    _, result = await _run(StepRejection(), ctx)
    info = result.info
    assert info["paths"] == 2 and info["accept"] == 0.5 and info["retries"] == 2
    right = "".join(line + "\n" for line in RIGHT)
    assert result.choices[0].reasoning == right
    assert info["path_scores"] == [0.9, 0.9]
    # Step 1: both paths draw (one request, n = 2), the second is rejected; step 2: the
    # kept path's line 2 and the second path's redraw of line 1, and so on.
    assert info["candidates_per_step"] == [2, 2, 2, 2, 1]
    assert info["survivors_per_step"] == [2, 2, 2, 1, 0]
    # Usage bills the rejected lines too.
    assert result.usage.completion_tokens == world.generated
    assert sum(info["tokens_per_step"]) + info["answer_tokens"] == world.generated


async def test_step_rejection_keeps_the_best_try_after_its_retries(testbed_tokens: Any) -> None:
    """A model that only writes wrong lines: each step is drawn 1 + retries times, then
    the best try is kept, so the path moves on and ends (scored low)."""
    world = World(testbed_tokens, right=lambda j: False)
    prm = ArithmeticPrm(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=1, prm=prm, options={"retries": 2})
    _, result = await _run(StepRejection(), ctx)
    info = result.info
    # Three lines, three tries each, then the closing step (rejected: the thinking did not
    # reach the answer) three times as well.
    assert info["candidates_per_step"] == [1] * 12
    assert info["survivors_per_step"] == [1] * 11 + [0]
    assert len(info["chosen_step_rewards"]) == LINES + 1
    assert max(info["chosen_step_rewards"]) == 0.1
    assert result.usage.completion_tokens == world.generated


async def test_step_rejection_accepting_everything_is_independent_samples(
    testbed_tokens: Any,
) -> None:
    world = World(testbed_tokens)
    prm = ArithmeticPrm(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=3, prm=prm, options={"accept": 0})
    _, result = await _run(StepRejection(), ctx)
    assert result.info["candidates_per_step"] == [3, 3, 3, 3]
    assert result.info["survivors_per_step"] == [3, 3, 3, 0]
    # Wrong lines kept as drawn (no redraw): some path scores the wrong lines' 0.1.
    assert min(result.info["path_scores"]) == 0.1


async def test_step_rejection_adaptive_stops_once_the_vote_settles(testbed_tokens: Any) -> None:
    """Rounds of 2 paths, cap 6: every path ends right (wrong lines are redrawn), so the
    first round's vote is settled and no second round starts."""
    world = World(testbed_tokens)
    prm = ArithmeticPrm(testbed_tokens)
    options = {"adaptive": True, "adaptive_round": 2}
    ctx = _ctx(testbed_tokens, world, samples=6, prm=prm, options=options)
    progress, result = await _run(StepRejection(), ctx)
    adaptive = result.info["adaptive"]
    assert adaptive["rounds"] == 1 and adaptive["stopped"] == "settled"
    assert adaptive["paths"] == 2 and len(result.info["path_scores"]) == 2
    assert adaptive["leader_share"] == 1.0
    phases = [p.data for p in progress if p.data.get("phase") == "adaptive"]
    assert phases == [{"phase": "adaptive", "samples": 2, "leader_share": 1.0, "settled": True}]
    assert result.choices[0].content == "\n\\boxed{3}"
    assert result.usage.completion_tokens == world.generated
    assert result.usage.prompt_tokens == len(ctx.request.prompt_token_ids)


async def test_step_rejection_adaptive_draws_to_the_cap_when_unsure(testbed_tokens: Any) -> None:
    """A model that only writes wrong lines: the PRM trusts no path (0.1 each), the
    leader never holds the least weight asked (1.0: ten such paths), so rounds go on to
    the cap; the prompt is billed once per round."""
    world = World(testbed_tokens, right=lambda j: False)
    prm = ArithmeticPrm(testbed_tokens)
    options = {"adaptive": True, "adaptive_round": 2, "adaptive_weight": 1.0, "retries": 0}
    ctx = _ctx(testbed_tokens, world, samples=5, prm=prm, options=options)
    _, result = await _run(StepRejection(), ctx)
    adaptive = result.info["adaptive"]
    assert adaptive["rounds"] == 3 and adaptive["stopped"] == "cap" and adaptive["paths"] == 5
    assert len(result.info["path_scores"]) == 5
    assert result.usage.completion_tokens == world.generated
    assert result.usage.prompt_tokens == 3 * len(ctx.request.prompt_token_ids)
    # The rounds continue the request's seeds: no draw repeats another's seed.
    seeds = [r.sampling.seed for r in world.requests]
    assert len(set(seeds)) == len(seeds)


def test_step_rejection_adaptive_needs_the_vote(testbed_tokens: Any) -> None:
    options = {"adaptive": True, "select": "best"}
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=4, options=options)
    with pytest.raises(InvalidRequest) as err:
        StepRejection().validate(ctx.request, ctx.engine)
    assert err.value.param == "adaptive"
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=4, options={"adaptive_round": 2})
    with pytest.raises(InvalidRequest) as err:
        StepRejection().validate(ctx.request, ctx.engine)
    assert err.value.param == "adaptive_round"


@pytest.mark.parametrize("ceiling", [19, 40, 80, 200, 600])
@pytest.mark.parametrize(
    ("strategy", "options"),
    [
        (BeamSearch(), {"expansions": 2}),
        (ParticleFiltering(), {}),
        (Dvts(), {"expansions": 2}),
        (StepRejection(), {}),
        (StepRejection(), {"adaptive": True, "select": "vote"}),
        (BeamSearch(), {"expansions": 2, "select": "vote"}),
    ],
)
async def test_a_request_ceiling_holds_and_the_search_answers(
    testbed_tokens: Any, strategy: StepSearch, options: dict[str, Any], ceiling: int
) -> None:
    """Under the request's total-token ceiling (held by its engine) a search stops
    expanding when the next step would not fit, and still answers from its best path."""
    from core.allowance import Allowance, Limits
    from server.pipeline.request_engine import RequestEngine, Tally, with_tally

    world = World(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, prm=ArithmeticPrm(testbed_tokens), options=options)
    allowance = Allowance(limits=Limits(tokens=ceiling, answer=18))
    tally = Tally()
    engine = RequestEngine(ctx.engine, tally, affinity="r", allowance=allowance)
    ctx = replace(ctx, engine=engine, allowance=allowance)
    strategy.validate(ctx.request, ctx.engine)
    result = None
    async for event in with_tally(strategy.run(ctx), tally, allowance):
        if isinstance(event, Result):
            result = event
    assert result is not None
    assert result.usage.completion_tokens <= ceiling
    assert world.generated <= ceiling  # every token the engine made, not only those billed
    assert "\\boxed{" in result.choices[0].content, (result.choices[0], result.info)
    if ceiling < 80:
        assert result.info["allowance"]["stopped_by"] == "tokens"


@pytest.mark.parametrize("strategy", [BeamSearch(), ParticleFiltering()])
async def test_without_a_prm_the_generators_certainty_rewards_the_steps(
    testbed_tokens: Any, strategy: StepSearch
) -> None:
    """``reward: certainty``: no PRM attached, no PRM call; each step's reward is exp(its
    mean sampled-token logprob), so the steps the model was sure of (the right ones here)
    win."""
    world = World(testbed_tokens)
    options: dict[str, Any] = {"reward": "certainty"}
    if isinstance(strategy, BeamSearch):
        options["expansions"] = 2
    else:
        options["resample_temperature"] = 0.05  # near-greedy: the surest particle spreads
    ctx = _ctx(testbed_tokens, world, samples=2, options=options)
    _, result = await _run(strategy, ctx)
    assert result.choices[0].reasoning == "".join(line + "\n" for line in RIGHT)
    info = result.info
    assert info["reward"] == "certainty" and info["prm_calls"] == 0 and info["prm_tokens"] == 0
    rewards = info["chosen_step_rewards"]
    assert rewards[:LINES] == [pytest.approx(math.exp(LINE_LOGPROB))] * LINES
    steps = [c for c in ctx.engine.calls if "answer" not in c.request_id]  # type: ignore[attr-defined]
    assert steps and all(c.sampling.token_logprobs == 0 for c in steps)


async def test_a_search_without_a_prm_asks_for_certainty(testbed_tokens: Any) -> None:
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=2)
    with pytest.raises(BackendUnavailable):
        await _run(BeamSearch(), ctx)
    with pytest.raises(InvalidRequest) as err:
        search_options(replace(ctx.request, options={"reward": "votes"}), SearchDefaults())
    assert err.value.param == "reward"
