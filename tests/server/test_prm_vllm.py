"""The testbed PRM served by vLLM: in process (``PrmEngine``, what ``thinkgate serve``
attaches by default) and behind a vLLM server's ``/pooling`` (``thinkgate replica --prm``,
``RemotePrm``, what ``--prm-url`` attaches): one reward per step, the same on both paths.
Exact-arithmetic steps above wrong ones is an expected failure of the shipped model.

The replica is the shared remote stack's PRM server (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import testbed
from engines.local.prm import PrmEngine, RemotePrm
from strategies.prm import ProcessRewardModel
from testbed.task import Question
from testbed.tokenizer import CharCodec, chat_prompt

# The engine's output handler runs in the loop that built it (the session's, where
# fixtures run): the tests must run there too.
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]

CODEC = CharCodec()
TAG = CODEC.encode("\n")[0]
Q = Question.from_expr("3+8-5+7")  # running values 1, 6, 3
# Pairs of paths that differ in their last step only: right, then wrong.
PAIRS = [
    (["3+8=1"], ["3+8=2"]),
    (["3+8=1", "1-5=6"], ["3+8=1", "1-5=4"]),
    (["3+8=1", "1-5+7=3"], ["3+8=1", "1-5+7=5"]),  # a merged line: base's usual error
    (["3+8=1", "check 1-8=3", "1-5=6", "6+7=3"], ["3+8=1", "check 1-8=3", "1-5=6", "6+7=2"]),
]


def _paths() -> list[list[list[int]]]:
    return [[CODEC.encode(s) for s in p] for pair in PAIRS for p in pair]


async def _score(prm: ProcessRewardModel) -> list[list[float]]:
    return await prm.score_paths(CODEC.encode(chat_prompt(Q.prompt)), _paths())


def _assert_one_reward_per_step(rewards: list[list[float]]) -> None:
    assert [len(r) for r in rewards] == [len(p) for pair in PAIRS for p in pair]
    assert all(0.0 <= x <= 1.0 for r in rewards for x in r)
    for i in range(len(PAIRS)):
        right, wrong = rewards[2 * i], rewards[2 * i + 1]
        # The shared prefix scores the same whatever follows (causal attention).
        assert right[:-1] == pytest.approx(wrong[:-1], abs=1e-5)


_IN_PROCESS: dict[str, list[list[float]]] = {}


@pytest.fixture(scope="module")
async def engine() -> AsyncIterator[PrmEngine]:
    prm = PrmEngine.start(str(testbed.model_path("prm")))
    try:
        yield prm
    finally:
        await prm.aclose()


async def test_in_process_prm_gives_one_reward_per_step(engine: PrmEngine) -> None:
    assert engine.step_tag_id == TAG
    prm = ProcessRewardModel(model=engine, step_tag_id=TAG, max_len=engine.max_model_len)
    rewards = await _score(prm)
    _assert_one_reward_per_step(rewards)
    _IN_PROCESS["rewards"] = rewards


async def test_in_process_prm_scores_exact_arithmetic_steps_right_above_wrong(
    engine: PrmEngine,
) -> None:
    prm = ProcessRewardModel(model=engine, step_tag_id=TAG, max_len=engine.max_model_len)
    rewards = await _score(prm)
    for i in range(len(PAIRS)):
        assert rewards[2 * i][-1] > rewards[2 * i + 1][-1] + 0.1, PAIRS[i]


async def test_a_grown_path_costs_the_prm_only_its_new_tokens(engine: PrmEngine) -> None:
    """A search scores a path again with one more step: vLLM's prefix cache computes only
    what follows the cached blocks, the kept rewards cover the tags before, and every
    reward is the one a computation from scratch gives."""
    prm = ProcessRewardModel(model=engine, step_tag_id=TAG, max_len=engine.max_model_len)
    prompt = CODEC.encode(chat_prompt(Q.prompt))
    steps = [CODEC.encode(s) for s in ["3+8=1", "check 1-8=3", "1-5=6", "6+7=3"]]
    await prm.score_paths(prompt, [steps[:3]])
    asked, scored = engine.asked_tokens, engine.scored_tokens
    grown = (await prm.score_paths(prompt, [steps]))[0]
    asked, scored = engine.asked_tokens - asked, engine.scored_tokens - scored
    assert scored < asked / 2, (scored, asked)  # the prompt and three steps were cached
    sequence = prm.sequence(prompt, steps)
    tags = [i for i, t in enumerate(sequence) if t == TAG]
    fresh = await engine._uncached("fresh", sequence, tags, [b"x"] * len(tags))
    assert grown == pytest.approx(fresh[-len(grown) :], abs=1e-4)


@pytest.fixture(scope="module")
def prm_replica(engine: PrmEngine, remote_stack: Any) -> str:
    """The shared remote stack's PRM server (``thinkgate replica --prm``, behind its
    gateway's ``--prm-url``): no second PRM server for this module."""
    engine._llm.shutdown()  # its work is done; free its cores for the stack
    assert remote_stack.prm is not None
    url: str = remote_stack.prm.url
    return url


async def test_prm_replica_serves_the_same_rewards_over_pooling(prm_replica: str) -> None:
    remote = RemotePrm(prm_replica, step_tag_id=TAG, timeout_s=60)
    try:
        rewards = await _score(ProcessRewardModel(model=remote, step_tag_id=TAG))
    finally:
        await remote.aclose()
    _assert_one_reward_per_step(rewards)
    if "rewards" in _IN_PROCESS:
        for a, b in zip(rewards, _IN_PROCESS["rewards"], strict=True):
            assert a == pytest.approx(b, abs=1e-4)
