"""The testbed PRM served by vLLM: in process (``PrmEngine``, what ``thinkgate serve``
attaches by default), behind thinkgate's PRM server (``thinkgate replica --prm``: the
shared remote stack's, tests/conftest.py) and behind vLLM's own server's ``/pooling``
(``thinkgate replica --prm --prm-server vllm``), both through ``RemotePrm`` (what
``--prm-url`` attaches): one reward per step, the same on every path, and thinkgate's
server reads its prefix cache (a grown path costs it the new tokens only).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

import testbed
from engines.local.prm import PrmEngine, RemotePrm, Tally
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
    # True arithmetic on the wrong operation (-5 skipped): base's commonest first error
    # (OPERAND_PAIR).
    (["3+8=1", "1-5=6"], ["3+8=1", "1+7=8"]),
    (["3+8=1", "check 1-8=3", "1-5=6", "6+7=3"], ["3+8=1", "check 1-8=3", "1-5=6", "6+7=2"]),
]

OPERAND_PAIR = 3


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


async def test_in_process_prm_catches_a_skipped_operation(engine: PrmEngine) -> None:
    """True arithmetic on the wrong operation: the PRM checks a line takes the question's
    next one (the exact-operation target it was trained with, models/prm/README.md)."""
    prm = ProcessRewardModel(model=engine, step_tag_id=TAG, max_len=engine.max_model_len)
    rewards = await _score(prm)
    right, wrong = rewards[2 * OPERAND_PAIR][-1], rewards[2 * OPERAND_PAIR + 1][-1]
    assert right > wrong + 0.1, PAIRS[OPERAND_PAIR]


async def test_in_process_prm_end_tag_knows_a_thinking_closed_early(engine: PrmEngine) -> None:
    """The closing step (``</think>`` and its tag): every operation done scores above the
    same right lines closed one operation short (the early-closed copies it was trained
    with, models/prm/README.md)."""
    prm = ProcessRewardModel(model=engine, step_tag_id=TAG, max_len=engine.max_model_len)
    done, short = await prm.score_paths(
        CODEC.encode(chat_prompt(Q.prompt)),
        [
            [CODEC.encode(s) for s in ("3+8=1", "1-5=6", "6+7=3", "</think>")],
            [CODEC.encode(s) for s in ("3+8=1", "1-5=6", "</think>")],
        ],
    )
    assert done[-1] > short[-1] + 0.3, (done, short)


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
    fresh = await engine._uncached("fresh", sequence, tags, [b"x"] * len(tags), Tally())
    assert grown == pytest.approx(fresh[-len(grown) :], abs=1e-4)
    # Calls at once: each one's tally holds its own tokens (what thinkgate's PRM server
    # reports per response and sums in /metrics), though the engine's counters mix them.
    other = prm.sequence(prompt, [steps[0], CODEC.encode("1-5=4")])
    tallies = (Tally(), Tally())
    asked = engine.asked_tokens
    twice, _ = await asyncio.gather(
        engine.step_rewards([sequence, sequence], tallies[0]),
        engine.step_rewards([other], tallies[1]),
    )
    assert (tallies[0].asked, tallies[1].asked) == (2 * len(sequence), len(other))
    assert engine.asked_tokens - asked == 2 * len(sequence) + len(other)
    # A copy in a call is computed once (here all cached but the last token) and gets
    # the same rewards.
    assert twice[0] == twice[1] and tallies[0].scored < len(sequence)
    assert 0 < tallies[1].scored < len(other)  # the prompt and the first step were cached


@pytest.fixture(scope="module")
def prm_replica(engine: PrmEngine, remote_stack: Any) -> str:
    """The shared remote stack's PRM server (``thinkgate replica --prm``, behind its
    gateway's ``--prm-url``): no second PRM server for this module."""
    engine._llm.shutdown()  # its work is done; free its cores for the stack
    assert remote_stack.prm is not None
    url: str = remote_stack.prm.url
    return url


async def _remote_rewards(url: str) -> list[list[float]]:
    remote = RemotePrm(url, step_tag_id=TAG, timeout_s=60)
    try:
        rewards = await _score(ProcessRewardModel(model=remote, step_tag_id=TAG))
    finally:
        await remote.aclose()
    _assert_one_reward_per_step(rewards)
    if "rewards" in _IN_PROCESS:
        for a, b in zip(rewards, _IN_PROCESS["rewards"], strict=True):
            assert a == pytest.approx(b, abs=1e-4)
    return rewards


def _counters(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("thinkgate_prm_")
    }


async def test_prm_replica_serves_the_same_rewards_over_pooling(prm_replica: str) -> None:
    await _remote_rewards(prm_replica)
    # Scored again, the same paths come from its cache: the engine computes nothing new
    # past each path's last cached block.
    before = _counters(prm_replica)
    again = await _remote_rewards(prm_replica)
    after = _counters(prm_replica)
    asked = after["thinkgate_prm_asked_tokens_total"] - before["thinkgate_prm_asked_tokens_total"]
    scored = (
        after["thinkgate_prm_scored_tokens_total"] - before["thinkgate_prm_scored_tokens_total"]
    )
    prompt = len(CODEC.encode(chat_prompt(Q.prompt)))
    assert asked > prompt * len(again), (asked, scored)
    assert scored < asked / 2, (scored, asked)


@pytest.fixture(scope="module")
def vllm_prm_replica(prm_replica: str) -> Iterator[str]:
    """vLLM's own server for the PRM (``--prm-server vllm``): STEP pooling, no cache.
    Started after the in-process engine is down (``prm_replica``)."""
    from conftest import Replica, _free_port, _log_dir

    port = _free_port()
    replica = Replica(
        f"http://127.0.0.1:{port}",
        port,
        ("--prm", "--prm-server", "vllm"),
        _log_dir() / "prm-vllm.log",
    )
    replica.start()
    try:
        replica.wait_ready()
        yield replica.url
    finally:
        replica.stop()


async def test_vllms_own_prm_server_gives_the_same_rewards(vllm_prm_replica: str) -> None:
    await _remote_rewards(vllm_prm_replica)
