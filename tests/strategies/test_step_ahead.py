"""Particle filtering's ``speculate``: the next step drawn while the PRM scores this one
(strategies.search.step_ahead), on the scripted engine and PRM of test_step_search."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from core.base import Result
from core.errors import InvalidRequest
from strategies.search.particle_filtering import ParticleFiltering
from tests.strategies.test_step_search import RIGHT, ArithmeticPrm, World, _ctx, _run


class WatchedPrm(ArithmeticPrm):
    """The arithmetic PRM, noting how many engine requests had arrived by the time each
    of its calls answered (after letting every other task run)."""

    def __init__(self, tokens: Any, world: World) -> None:
        super().__init__(tokens)
        self.world = world
        self.seen: list[int] = []

    async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        for _ in range(10):
            await asyncio.sleep(0)
        self.seen.append(len(self.world.requests))
        return await super().step_rewards(sequences)


async def _filtering(
    tokens: Any,
    world: World,
    *,
    samples: int,
    prm: Any = None,
    seed: int | None = 0,
    **options: Any,
) -> Result:
    """Particle filtering over ``world`` (the arithmetic PRM unless ``prm``)."""
    prm = ArithmeticPrm(tokens) if prm is None else prm
    ctx = _ctx(tokens, world, samples=samples, prm=prm, seed=seed, options=options)
    _, result = await _run(ParticleFiltering(), ctx)
    return result


def _alternating() -> Any:
    """Right, right, wrong, ... over every line the world writes (a request's only
    sample is j = 0, so a rule by j alone would write every speculative line right)."""
    count = itertools.count()
    return lambda j: next(count) % 3 != 2


async def test_the_next_step_is_drawn_while_the_prm_scores(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=_alternating())
    prm = WatchedPrm(testbed_tokens, world)
    result = await _filtering(testbed_tokens, world, samples=4, prm=prm, speculate=True)
    info = result.info
    assert info["speculate"] is True
    # Before the PRM answered step 1, step 2's requests were already with the engine.
    first_round = sum(1 for r in world.requests if r.request_id.startswith("r-s1-"))
    assert prm.seen[0] > first_round
    # The wrong lines' particles were dropped after their next step had been drawn.
    assert info["ahead_used"] > 0 and info["ahead_dropped"] > 0
    # Every generated token is billed, the dropped particles' steps included.
    assert result.usage.completion_tokens == world.generated
    assert sum(info["tokens_per_step"]) + info["answer_tokens"] == world.generated
    # A step's candidates are its speculative round and its extra copies, in one entry.
    assert len(info["candidates_per_step"]) == info["steps"]
    step_samples = sum(r.sampling.n for r in world.requests if r.request_id.startswith("r-s"))
    assert sum(info["candidates_per_step"]) == step_samples
    assert result.choices[0].content == "\n\\boxed{3}"


async def test_without_speculate_nothing_is_drawn_ahead(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=_alternating())
    prm = WatchedPrm(testbed_tokens, world)
    result = await _filtering(testbed_tokens, world, samples=4, prm=prm)
    # Each PRM call saw only the rounds up to its own step: the generator waited for it.
    for call, seen in enumerate(prm.seen):
        rounds = {int(r.request_id.split("-")[1][1:]) for r in world.requests[:seen]}
        assert max(rounds) == call + 1, (call, rounds)
    assert "ahead_used" not in result.info and result.info["speculate"] is False


async def test_a_speculative_search_bills_and_ends_like_one_without(testbed_tokens: Any) -> None:
    """The PRM says every line is right: the rule keeps every particle once, every step
    drawn ahead is used, and the search takes the same steps as without speculating."""
    outs = []
    for speculate in (False, True):
        world = World(testbed_tokens, right=lambda j: True)
        result = await _filtering(testbed_tokens, world, samples=3, speculate=speculate)
        assert result.usage.completion_tokens == world.generated
        outs.append((result.info["steps"], result.info["survivors_per_step"], result.choices[0]))
        if speculate:
            # Steps 2.. and the closing step were drawn ahead for 3 particles each;
            # the last round's draw (after every particle closed) was never made.
            assert result.info["ahead_dropped"] == 0
            assert result.info["ahead_used"] == 3 * len(RIGHT)
    assert outs[0] == outs[1]


async def test_max_steps_draws_no_step_past_the_last(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=lambda j: True)
    result = await _filtering(testbed_tokens, world, samples=2, speculate=True, max_steps=2)
    assert result.info["steps"] == 2 and result.info["forced_paths"] == 2
    # Two step rounds (the first, and the second drawn ahead) and the answers.
    step_rounds = {r.request_id.split("-")[1] for r in world.requests if r.request_id[2] == "s"}
    assert len(step_rounds) == 2
    assert result.usage.completion_tokens == world.generated


async def test_a_seeded_speculative_search_is_reproducible(testbed_tokens: Any) -> None:
    outs = []
    for _ in range(2):
        world = World(testbed_tokens, right=_alternating())
        result = await _filtering(testbed_tokens, world, samples=5, seed=11, speculate=True)
        info = result.info
        seeds = [r.sampling.seed for r in world.requests]
        outs.append((info["candidates_per_step"], info["path_scores"], info["ahead_used"], seeds))
    assert outs[0] == outs[1]
    assert len(set(outs[0][3])) == len(outs[0][3])  # every request a seed of its own


async def test_a_client_gone_cancels_the_step_drawn_ahead(testbed_tokens: Any) -> None:
    world = World(testbed_tokens, right=lambda j: True)
    scoring = asyncio.Event()

    class BlockingPrm(ArithmeticPrm):
        async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
            world.hold = asyncio.Event()  # the step drawn ahead waits in the engine
            scoring.set()
            await asyncio.Event().wait()  # and the PRM never answers
            return []

    ctx = _ctx(
        testbed_tokens,
        world,
        samples=3,
        prm=BlockingPrm(testbed_tokens),
        options={"speculate": True},
    )
    consumer = asyncio.ensure_future(_run(ParticleFiltering(), ctx))
    await asyncio.wait_for(scoring.wait(), 5)
    for _ in range(20):
        await asyncio.sleep(0)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    # The first step's one request (3 copies of the root) answered; those drawn ahead
    # (one request per distinct line) were waiting, and were cancelled with the request.
    calls = ctx.engine.calls  # type: ignore[attr-defined]
    assert calls[0].request_id.startswith("r-s1-") and len(calls) >= 2
    assert world.cancelled == len(calls) - 1


def test_speculate_must_be_a_boolean(testbed_tokens: Any) -> None:
    ctx = _ctx(testbed_tokens, World(testbed_tokens), samples=2, options={"speculate": "yes"})
    with pytest.raises(InvalidRequest) as err:
        ParticleFiltering().validate(ctx.request, ctx.engine)
    assert err.value.param == "speculate"
