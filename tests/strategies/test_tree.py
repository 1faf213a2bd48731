"""Tree sampling on a scripted engine: forks follow the uncertainty signal, a shared prefix
is generated and billed once, early stop and the fallback, budgets per leaf, seeds, and a
client that leaves. End to end through vLLM: tests/server/test_tree_api.py.

The scripted model continues the testbed thinking ``3+8=1 / 1-5=6 / 6+7=3`` (one
character one token) for as many tokens as a call allows, then closes its thinking, then
answers from the last value its lines reached. What a sample writes and how sure it is
of it are functions of where its path stands, so a test decides where the tree is unsure.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from core.base import Progress, Resources, Result, StrategyContext, StrategyRequest
from core.budget import Budget
from core.engine import GenerateRequest, Sample, SamplingConfig, TokenLogprob
from core.errors import InvalidBudget, InvalidRequest
from engines.scripted import ScriptedEngine
from strategies.reasoning import thinking_open_after
from strategies.search_options import DEFAULTS_KEY, SearchDefaults
from strategies.selection import AnswerClass
from strategies.tree.sampler import TreeSampling
from strategies.tree.vote import VoteStop, could_settle, lead_probability, settle_chance, settled

QUESTION = "Compute 3+8-5+7 mod 10."
THINKING = "3+8=1\n1-5=6\n6+7=3\n"
WRONG = "3+9=2\n2-5=7\n7+7=4\n"  # another path (its first segment differs), answer 4
SURE = -0.05
UNSURE = -2.0

# Where a path stands (its thinking so far) and the sample's index -> what it writes next.
Writer = Callable[[str, int], str]
Sureness = Callable[[str, int], float]


class TreeWorld:
    """The scripted model: a call continues ``write(thinking, j)`` (default: the right
    thinking) for ``max_tokens`` tokens, or closes the thinking once it is written; each
    token's logprob is ``sure(thinking, j)``. Counts every token it generated."""

    def __init__(
        self,
        tokens: Any,
        write: Writer = lambda thinking, j: THINKING,
        sure: Sureness = lambda thinking, j: SURE,
        eos_after_thinking: bool = False,
    ) -> None:
        self.tokens = tokens
        self.write = write
        self.sure = sure
        self.eos_after_thinking = eos_after_thinking
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
        t = self.tokens
        # After the template's "<think>" (a special token, decoded as nothing) and newline.
        text = t.decode(request.prompt_token_ids).split("assistant\n\n", 1)[1]
        limit = request.sampling.max_tokens
        out = []
        # A call that does not stop at the end of thinking runs on into the answer.
        through = t.think_end_id not in request.sampling.stop_token_ids
        for j in range(request.sampling.n):
            if t.think_end_id in request.prompt_token_ids:
                # The answer, from where a call before this one left it.
                prompt = request.prompt_token_ids
                written = len(prompt) - prompt.index(t.think_end_id) - 1
                ids, finish = _answer_ids(t, text, (), limit, skip=written)
                out.append(Sample(index=j, token_ids=ids, finish_reason=finish))
                continue
            target = self.write(text, j)
            rest = target[len(text) :]
            if not rest:
                if self.eos_after_thinking:
                    sample = Sample(index=j, token_ids=(t.eos_token_ids[0],), finish_reason="stop")
                elif through:
                    ids, finish = _answer_ids(t, text, (t.think_end_id,), limit)
                    sample = Sample(index=j, token_ids=ids, finish_reason=finish)
                else:
                    sample = Sample(
                        index=j, token_ids=(t.think_end_id,), finish_reason="stop", stop_reason=4
                    )
            else:
                ids = tuple(t.encode(rest))
                if limit is not None:
                    ids = ids[:limit]
                sample = Sample(index=j, token_ids=ids, finish_reason="length")
            if request.sampling.token_logprobs is not None:
                lp = self.sure(text, j)
                sample = Sample(
                    index=sample.index,
                    token_ids=sample.token_ids,
                    finish_reason=sample.finish_reason,
                    stop_reason=sample.stop_reason,
                    logprobs=tuple(TokenLogprob(i, lp) for i in sample.token_ids),
                )
            out.append(sample)
        self.generated += sum(len(s.token_ids) for s in out)
        return out


def _answer_ids(
    t: Any, thinking: str, before: tuple[int, ...], limit: int | None, skip: int = 0
) -> tuple[tuple[int, ...], str]:
    """``before`` and the answer from the last value the thinking's lines reached (its
    first ``skip`` tokens left out: written already), cut at ``limit`` tokens (then
    finished by "length")."""
    lines = [ln for ln in thinking.split("\n") if "=" in ln]
    value = lines[-1].rsplit("=", 1)[1][:1] if lines else "0"
    answer = (*t.encode(f"\n\\boxed{{{value}}}"), t.eos_token_ids[0])
    ids = (*before, *answer[skip:])
    if limit is not None and len(ids) > limit:
        return ids[:limit], "length"
    return ids, "stop"


def _ctx(
    tokens: Any,
    world: TreeWorld,
    *,
    samples: int,
    options: dict[str, Any] | None = None,
    thinking: int | None = None,
    solution: int | None = None,
    max_tokens: int | None = None,
    seed: int | None = 0,
) -> StrategyContext:
    prompt = tuple(tokens.render_chat([{"role": "user", "content": QUESTION}]))
    request = StrategyRequest(
        request_id="r",
        prompt_token_ids=prompt,
        thinking_open=thinking_open_after(prompt, tokens),
        n=1,
        sampling=SamplingConfig(seed=seed, max_tokens=max_tokens),
        budget=Budget(samples=samples, thinking=thinking, solution=solution),
        stream=False,
        # The scripted model's tokens are characters: 32-token alignment (the default)
        # would reshape every segment; test_align_* turns it on. The vote-aware stop would
        # end most of these trees early (their leaves agree); test_vote_stop_* turn it on.
        options={"align": 0, "vote_stop": "never", **(options or {})},
    )
    items: dict[str, object] = {DEFAULTS_KEY.name: SearchDefaults(step_delimiter="\n")}
    engine = ScriptedEngine(world, tokens=tokens)
    return StrategyContext(engine=engine, request=request, resources=Resources(items=items))


async def _run(ctx: StrategyContext) -> tuple[list[Progress], Result]:
    strategy = TreeSampling()
    strategy.validate(ctx.request, ctx.engine)
    progress: list[Progress] = []
    gen: AsyncGenerator[Any, None] = strategy.run(ctx)
    async for event in gen:
        if isinstance(event, Result):
            return progress, event
        progress.append(event)
    raise AssertionError("no result")


def _calls(ctx: StrategyContext) -> list[GenerateRequest]:
    return ctx.engine.calls  # type: ignore[attr-defined,no-any-return]


def _segments(ctx: StrategyContext) -> list[list[GenerateRequest]]:
    """The thinking calls, by segment (request ids ``r-t<segment>-<g>``)."""
    out: dict[int, list[GenerateRequest]] = {}
    for call in _calls(ctx):
        if "-t" in call.request_id:
            out.setdefault(int(call.request_id.split("-t")[1].split("-")[0]), []).append(call)
    return [out[k] for k in sorted(out)]


def _starts(ctx: StrategyContext, seg: Sequence[GenerateRequest]) -> list[tuple[int, int]]:
    """A segment's calls as (tokens after the prompt they start from, children)."""
    prompt = len(ctx.request.prompt_token_ids)
    return sorted((len(c.prompt_token_ids) - prompt, c.sampling.n) for c in seg)


def _variant(text: str, j: int, wrong: Callable[[int], bool]) -> str:
    """Roots choose their path by index (``wrong(j)``: WRONG); children follow theirs."""
    if not text:
        return WRONG if wrong(j) else THINKING
    return WRONG if text.startswith(WRONG[:3]) else THINKING


async def test_forks_follow_the_uncertainty_signal(testbed_tokens: Any) -> None:
    """Two roots, the second unsure of its first segment: it forks, the sure one goes on
    as one branch."""
    world = TreeWorld(
        testbed_tokens,
        write=lambda text, j: _variant(text, j, lambda j: j == 1),
        sure=lambda text, j: UNSURE if (not text and j == 1) else SURE,
    )
    # No early stop: with two branches, the unsure one is also far below the median.
    options = {"segment": 3, "roots": 2, "branch": 3, "fork_depth": 4, "stop_margin": 0}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    segs = _segments(ctx)
    assert [c.sampling.n for c in segs[0]] == [2]  # the roots, one request
    after = {testbed_tokens.decode(c.prompt_token_ids)[-3:]: c.sampling.n for c in segs[1]}
    assert after == {THINKING[:3]: 1, WRONG[:3]: 2}
    tree = result.info["tree"]
    assert tree["leaves"] == 4 and result.samples == 4
    # The last free leaf waits for a sure segment to be above the tree's mean or for
    # segment fork_depth, where free leaves are placed whatever the uncertainty.
    assert [sum(c.sampling.n for c in seg) for seg in segs[:4]] == [2, 3, 3, 4]


async def test_fork_at_parent_draws_the_unsure_segment_again(testbed_tokens: Any) -> None:
    """``fork_at: parent``: the unsure root's segment is drawn again from the prompt beside
    it, instead of the unsure root forking after it."""
    world = TreeWorld(
        testbed_tokens,
        write=lambda text, j: _variant(text, j, lambda j: j == 1),
        sure=lambda text, j: UNSURE if (not text and j == 1) else SURE,
    )
    options = {"segment": 3, "roots": 2, "branch": 3, "fork_depth": 4, "stop_margin": 0}
    ctx = _ctx(testbed_tokens, world, samples=4, options={**options, "fork_at": "parent"})
    _, result = await _run(ctx)
    segs = _segments(ctx)
    after = _starts(ctx, segs[1])
    assert after == [(0, 1), (3, 1), (3, 1)]  # a redraw from the prompt, both roots go on
    assert result.info["tree"]["leaves"] == 4


class DigitWorld(TreeWorld):
    """The right thinking, every token sure but the first line's result digit (the fifth
    token of the thinking, ``1`` in ``3+8=1``)."""

    async def __call__(self, request: GenerateRequest) -> Sequence[Sample]:
        samples = await super().__call__(request)
        t = self.tokens
        if t.think_end_id in request.prompt_token_ids or request.sampling.token_logprobs is None:
            return samples
        at = len(t.decode(request.prompt_token_ids).split("assistant\n\n", 1)[1])
        return [
            replace(
                s,
                logprobs=tuple(
                    TokenLogprob(tok, UNSURE if at + k == 4 else SURE)
                    for k, tok in enumerate(s.token_ids)
                ),
            )
            for s in samples
        ]


async def test_fork_at_token_draws_again_from_the_least_sure_token(testbed_tokens: Any) -> None:
    """``fork_at: token``: the forking node is cut before its least likely token, and the
    new children are drawn from there: they share the four tokens before it, billed once."""
    world = DigitWorld(testbed_tokens)
    options = {"segment": 6, "roots": 1, "branch": 3, "fork_depth": 2, "stop_margin": 0}
    ctx = _ctx(testbed_tokens, world, samples=3, options={**options, "fork_at": "token"})
    _, result = await _run(ctx)
    segs = _segments(ctx)
    after = _starts(ctx, segs[1])
    # The root goes on after its segment; two children from "3+8=", before the digit.
    assert after == [(4, 2), (6, 1)]
    assert testbed_tokens.decode(segs[1][0].prompt_token_ids).endswith("3+8=") or (
        testbed_tokens.decode(segs[1][1].prompt_token_ids).endswith("3+8=")
    )
    tree = result.info["tree"]
    assert tree["leaves"] == 3 and result.samples == 3
    assert result.usage.completion_tokens == world.generated
    assert tree["shared_tokens"] == 2 * 4 and tree["stopped_tokens"] == 0
    assert sum(tree["tokens_per_segment"]) == tree["leaf_tokens"] - tree["shared_tokens"]
    assert sum(tree["tokens_by_depth"]) == sum(tree["tokens_per_segment"])
    assert result.choices[0].content == "\n\\boxed{3}"


async def test_align_ends_segments_one_past_a_cache_block(testbed_tokens: Any) -> None:
    """``align: 8``: every segment after the first is sent with 8k + 1 ids (vLLM reads
    8k of them from its cache); segment lengths are the aligned ones nearest ``segment``.
    A segment shorter than the block is left as asked."""
    world = TreeWorld(testbed_tokens)
    options = {"segment": 8, "align": 8, "roots": 1, "branch": 2, "fork_depth": 3}
    ctx = _ctx(testbed_tokens, world, samples=4, options={**options, "stop_margin": 0})
    _, result = await _run(ctx)
    segs = _segments(ctx)
    # Ids sent per segment: 44 (the prompt), 49, 57, then 62 (the thinking's last five
    # tokens came short of their segment, so the call that closes it is not aligned).
    assert [len(seg[0].prompt_token_ids) for seg in segs] == [44, 49, 57, 62]
    for seg in segs[1:-1]:
        for call in seg:
            assert len(call.prompt_token_ids) % 8 == 1, len(call.prompt_token_ids)
    for seg in segs:
        for call in seg:
            assert call.sampling.max_tokens in (
                (1 - len(call.prompt_token_ids)) % 8 or 8,
                ((1 - len(call.prompt_token_ids)) % 8 or 8) + 8,
            )
    assert result.info["tree"]["leaves"] == 4
    assert result.choices[0].content == "\n\\boxed{3}"
    short = _ctx(
        testbed_tokens,
        TreeWorld(testbed_tokens),
        samples=4,
        options=options | {"segment": 5, "stop_margin": 0},
    )
    await _run(short)
    assert _segments(short)[0][0].sampling.max_tokens == 5


async def test_a_shared_prefix_is_generated_and_billed_once(testbed_tokens: Any) -> None:
    world = TreeWorld(testbed_tokens)
    options = {"segment": 3, "roots": 1, "branch": 2, "fork_depth": 3, "stop_margin": 0}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    tree = result.info["tree"]
    # Usage is what the engine generated, each token once.
    assert result.usage.completion_tokens == world.generated
    assert sum(tree["tokens_per_segment"]) + tree["answer_tokens"] == world.generated
    # Four leaves of the whole thinking (18 tokens and the close): as independent samples
    # that is 4 x 19 tokens of thinking; the tree shared its first segments.
    assert tree["leaves"] == 4
    assert tree["leaf_tokens"] == 4 * (len(THINKING) + 1)
    assert tree["shared_tokens"] > 0 and tree["stopped_tokens"] == 0
    assert sum(tree["tokens_per_segment"]) == tree["leaf_tokens"] - tree["shared_tokens"]
    assert sum(tree["tokens_by_depth"]) == sum(tree["tokens_per_segment"])
    # A child's request is its parent's ids after the prompt: the prefix cache's.
    for seg in _segments(ctx)[1:]:
        for call in seg:
            assert call.prompt_token_ids[: len(ctx.request.prompt_token_ids)] == (
                ctx.request.prompt_token_ids
            )
    # One engine round per segment: each segment's requests were one submission.
    batches = ctx.engine.batches  # type: ignore[attr-defined]
    assert len(batches) == tree["segments"] + 1  # and the answers
    assert result.choices[0].content == "\n\\boxed{3}"
    assert result.info["classes"][0]["count"] == 4


ANSWER = "\n\\boxed{3}"  # the scripted answer: 10 tokens, then EOS


async def test_a_leaf_answers_in_its_last_segment(testbed_tokens: Any) -> None:
    """Segments run on past the end of thinking: a leaf whose thinking closes with room
    left in the segment writes its answer in the same call, so the tree has no answer
    round. The same tree with a client stop sequence (which would end the thinking too)
    answers in calls of its own, with the same answer."""
    options = {"segment": 16, "roots": 2, "branch": 2, "fork_depth": 2, "stop_margin": 0}
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    tree = result.info["tree"]
    end = testbed_tokens.think_end_id
    assert all(end not in c.sampling.stop_token_ids for seg in _segments(ctx) for c in seg)
    assert not [c for c in _calls(ctx) if "-answer-" in c.request_id]
    assert len(ctx.engine.batches) == tree["segments"]  # type: ignore[attr-defined]
    assert tree["leaves"] == 4 and tree["answered_within"] == 4
    assert tree["answer_tokens"] == 4 * (len(ANSWER) + 1)
    # The answers are billed as answers, once; the thinking as thinking.
    assert result.usage.completion_tokens == world.generated
    assert sum(tree["tokens_per_segment"]) + tree["answer_tokens"] == world.generated
    assert tree["leaf_tokens"] == 4 * (len(THINKING) + 1)
    # Thinking is every segment's token but each leaf's "</think>".
    assert result.usage.reasoning_tokens == sum(tree["tokens_per_segment"]) - 4
    assert result.choices[0].content == ANSWER and result.choices[0].reasoning == THINKING
    assert result.choices[0].finish_reason == "stop"

    world = TreeWorld(testbed_tokens)
    own = _ctx(testbed_tokens, world, samples=4, options=options)
    sampling = replace(own.request.sampling, stop=("###",))
    own = replace(own, request=replace(own.request, sampling=sampling))
    _, alone = await _run(own)
    assert all(end in c.sampling.stop_token_ids for seg in _segments(own) for c in seg)
    assert [c for c in _calls(own) if "-answer-" in c.request_id]
    assert alone.info["tree"]["answered_within"] == 0
    assert alone.choices[0].content == ANSWER
    # Answered in calls of their own, the four leaves' alike paths share one answer;
    # written in their segments, each leaf wrote its own.
    assert alone.info["tree"]["answer_tokens"] == len(ANSWER) + 1


async def test_an_answer_cut_by_its_segment_goes_on_in_a_call_of_its_own(
    testbed_tokens: Any,
) -> None:
    """A segment's end cuts the answer its leaf began: the answer call goes on from
    where it stopped (the answer is written once, not twice) under what is left of the
    solution budget."""
    options = {"segment": 6, "roots": 2, "branch": 2, "fork_depth": 2, "stop_margin": 0}
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    tree = result.info["tree"]
    assert tree["answered_within"] == 4
    answers = [c for c in _calls(ctx) if "-answer-" in c.request_id]
    # The four leaves' thinking and answer beginnings are alike: one call goes on.
    assert len(answers) == 1
    began = testbed_tokens.decode(answers[0].prompt_token_ids).rsplit("\n", 1)[1]
    assert began == "\\box"  # "</think>" and five of the answer's tokens, then the cut
    assert result.choices[0].content == ANSWER
    assert result.usage.completion_tokens == world.generated
    assert sum(tree["tokens_per_segment"]) + tree["answer_tokens"] == world.generated

    # A solution budget of 7: at least the segment, so the answer begins in it (5 tokens),
    # and the answer call may write 2 more.
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, options=options, solution=7)
    _, result = await _run(ctx)
    assert result.info["tree"]["answered_within"] == 4
    calls = [c for c in _calls(ctx) if "-answer-" in c.request_id]
    assert [c.sampling.max_tokens for c in calls] == [2]
    choice = result.choices[0]
    assert choice.content == ANSWER[:7] and choice.finish_reason == "length"
    assert choice.budget_cut == ("solution",)

    # Below the segment, the solution budget keeps the answer in a call of its own.
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, options=options, solution=5)
    _, result = await _run(ctx)
    assert result.info["tree"]["answered_within"] == 0
    end = testbed_tokens.think_end_id
    assert all(end in c.sampling.stop_token_ids for seg in _segments(ctx) for c in seg)
    assert result.choices[0].content == ANSWER[:5]


async def test_vote_stop_settles_on_answers_written_in_segments(testbed_tokens: Any) -> None:
    """Three of four roots close their thinking in segment 2 and answer in it: the vote
    is decided there, with no answer call, and the long root is abandoned."""
    world = TreeWorld(testbed_tokens, write=_finishing(lambda j: j < 3))
    options = {"segment": 16, "roots": 4, "stop_margin": 0, "vote_stop": "decided"}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    tree = result.info["tree"]
    assert not [c for c in _calls(ctx) if "-answer-" in c.request_id]
    assert tree["settled_at"] == tree["segments"] and tree["abandoned"] == 1
    assert result.info["leaf_answers"] == ["3"] * 3
    assert result.usage.completion_tokens == world.generated


async def test_roots_equal_to_n_are_independent_samples(testbed_tokens: Any) -> None:
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=3, options={"segment": 6, "roots": 3})
    _, result = await _run(ctx)
    segs = _segments(ctx)
    assert [c.sampling.n for c in segs[0]] == [3]
    assert all(c.sampling.n == 1 for seg in segs[1:] for c in seg)
    tree = result.info["tree"]
    assert tree["forks"] == 1 and tree["shared_tokens"] == 0 and tree["leaves"] == 3


async def test_a_weak_branch_stops_early_and_its_leaf_is_drawn_again(testbed_tokens: Any) -> None:
    """Four roots; the two on the other path are unsure of their second segment: they stop,
    and their leaves are forked from the surviving branches, so four leaves still vote."""
    world = TreeWorld(
        testbed_tokens,
        write=lambda text, j: _variant(text, j, lambda j: j >= 2),
        sure=lambda text, j: UNSURE if text == WRONG[:3] else SURE,
    )
    options = {"segment": 3, "roots": 4, "branch": 2, "fork_depth": 2}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    progress, result = await _run(ctx)
    tree = result.info["tree"]
    assert tree["stops"] == 2 and progress[1].data["stops"] == 2
    stopped = [c for c in progress[1].data["tree"] if c["kept"] == 0]  # type: ignore[index,union-attr]
    assert len(stopped) == 2
    assert tree["leaves"] == 4  # the stopped leaves forked again from the survivors
    assert tree["stopped_tokens"] == 2 * 6  # two roots' two segments, no leaf under them
    assert result.info["leaf_answers"] == ["3"] * 4
    assert result.usage.completion_tokens == world.generated


async def test_at_most_half_the_live_branches_stop_in_a_segment(testbed_tokens: Any) -> None:
    world = TreeWorld(
        testbed_tokens,
        write=lambda text, j: _variant(text, j, lambda j: j >= 1),
        sure=lambda text, j: UNSURE if text == WRONG[:3] else SURE,
    )
    ctx = _ctx(testbed_tokens, world, samples=4, options={"segment": 3, "roots": 4})
    progress, _ = await _run(ctx)
    # Three of four are weak, but the median is theirs: none is far below it.
    assert progress[1].data["stops"] == 0


async def test_stop_margin_zero_never_stops(testbed_tokens: Any) -> None:
    world = TreeWorld(testbed_tokens, sure=lambda text, j: UNSURE if len(text) == 3 else SURE)
    options = {"segment": 3, "roots": 4, "stop_margin": 0}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    assert result.info["tree"]["stops"] == 0


async def test_logprobs_are_asked_only_where_the_tree_reads_them(testbed_tokens: Any) -> None:
    """Forks by uncertainty and the early stop read the sampled tokens' logprobs; with
    both off (and the majority vote) the segments ask none, and the leaves still fork
    into N, the first drawn first."""
    options = {"segment": 3, "roots": 2, "branch": 2, "fork_depth": 3}
    for extra, asked in (
        ({}, True),
        ({"fork_above": 0, "stop_margin": 0}, False),
        ({"fork_above": 0, "stop_margin": 0, "vote": "confidence"}, True),
        ({"fork_above": 0, "stop_margin": 0.5}, True),
        ({"stop_margin": 0}, True),
    ):
        ctx = _ctx(testbed_tokens, TreeWorld(testbed_tokens), samples=4, options=options | extra)
        _, result = await _run(ctx)
        segments = [c for seg in _segments(ctx) for c in seg]
        assert {c.sampling.token_logprobs is not None for c in segments} == {asked}, extra
        tree = result.info["tree"]
        assert isinstance(tree, dict) and tree["leaves"] == 4
        if not asked:
            # Every node's surprisal is 0: the free leaves go to the first drawn branch.
            assert _starts(ctx, _segments(ctx)[1]) == [(3, 1), (3, 2)]


async def test_when_every_branch_has_finished_the_fallback_redraws(testbed_tokens: Any) -> None:
    """Two roots end after one segment (EOS): two leaves are still free, so the least sure
    segment is drawn again from before it (here, the prompt)."""
    world = TreeWorld(testbed_tokens, write=lambda text, j: "", eos_after_thinking=True)
    options = {"segment": 3, "roots": 2, "branch": 2, "fork_depth": 8}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    tree = result.info["tree"]
    assert tree["fallbacks"] == 1 and tree["leaves"] == 4
    assert [sum(c.sampling.n for c in seg) for seg in _segments(ctx)] == [2, 2]


async def test_budgets_hold_per_leaf(testbed_tokens: Any) -> None:
    world = TreeWorld(testbed_tokens)
    options = {"segment": 4, "roots": 2, "branch": 2, "fork_depth": 2}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options, thinking=10, solution=3)
    _, result = await _run(ctx)
    for call in _calls(ctx):
        assert call.sampling.max_tokens is not None
        if "-t" in call.request_id:
            thought = len(call.prompt_token_ids) - len(ctx.request.prompt_token_ids)
            assert thought + call.sampling.max_tokens <= 10
        else:
            assert call.sampling.max_tokens <= 3  # the solution budget
    choice = result.choices[0]
    assert choice.budget_cut == ("thinking", "solution")
    assert len(testbed_tokens.encode(choice.reasoning)) <= 10


async def test_max_tokens_caps_each_leaf(testbed_tokens: Any) -> None:
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=2, options={"segment": 5}, max_tokens=12)
    _, result = await _run(ctx)
    prompt = len(ctx.request.prompt_token_ids)
    for call in _calls(ctx):
        assert len(call.prompt_token_ids) - prompt + (call.sampling.max_tokens or 0) <= 12


async def test_the_confidence_vote_weighs_sure_leaves(testbed_tokens: Any) -> None:
    """Two unsure leaves agree on a wrong answer, one sure leaf is right: a majority
    follows the two, the confidence vote the one."""
    for vote, expected in (("majority", "4"), ("confidence", "3")):
        world = TreeWorld(
            testbed_tokens,
            write=lambda text, j: _variant(text, j, lambda j: j >= 1),
            sure=lambda text, j: SURE if _variant(text, j, lambda j: j >= 1) == THINKING else -3.0,
        )
        options = {"segment": 64, "roots": 3, "vote": vote, "stop_margin": 0}
        ctx = _ctx(testbed_tokens, world, samples=3, options=options)
        _, result = await _run(ctx)
        assert result.choices[0].content == f"\n\\boxed{{{expected}}}", vote
        assert result.info["vote"] == vote
        assert sorted(result.info["leaf_answers"]) == ["3", "4", "4"]


async def test_a_seeded_tree_is_reproducible(testbed_tokens: Any) -> None:
    drawn = []
    for _ in range(2):
        world = TreeWorld(testbed_tokens, sure=lambda text, j: UNSURE if j % 2 else SURE)
        ctx = _ctx(testbed_tokens, world, samples=6, options={"segment": 3}, seed=11)
        await _run(ctx)
        drawn.append([(c.request_id, c.sampling.seed, c.sampling.n) for c in _calls(ctx)])
    assert drawn[0] == drawn[1]
    seeds = [seed for _, seed, _ in drawn[0]]
    assert len(set(seeds)) == len(seeds)  # every request its own seed


async def test_progress_per_segment(testbed_tokens: Any) -> None:
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, options={"segment": 6, "roots": 1})
    progress, result = await _run(ctx)
    assert len(progress) == result.info["tree"]["segments"]
    first = progress[0].data
    assert first["segment"] == first["step"] == 1
    # One root, sure of its first line: above the tree's mean (its own), so it forks.
    assert first["tree"] == [
        {"parent": 0, "reward": pytest.approx(0.951229, abs=1e-6), "kept": 2,
         "finished": False, "text": THINKING[:6]}
    ]  # fmt: skip
    assert progress[-1].data["live"] == 0 and progress[-1].data["complete"] == 4


async def test_a_client_that_leaves_aborts_every_branch(testbed_tokens: Any) -> None:
    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4, options={"segment": 3, "roots": 4})
    world.hold = asyncio.Event()
    consumer = asyncio.ensure_future(_run(ctx))
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(_calls(ctx)) >= 1
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    assert world.cancelled == len(_calls(ctx))


SHORT = "4+9=3\n"  # a path that finishes after one 6-token segment, answer 3


def _finishing(short: Callable[[int], bool], long: str = WRONG) -> Writer:
    """Roots choose by index: ``short(j)`` finish after one segment (answer 3), the rest
    write ``long`` (three segments); children follow their root."""

    def write(text: str, j: int) -> str:
        if not text:
            return SHORT if short(j) else long
        return SHORT if text.startswith(SHORT[:3]) else long

    return write


async def test_vote_stop_decided_ends_the_tree_once_no_leaf_to_come_could_change_it(
    testbed_tokens: Any,
) -> None:
    """Three of four roots finish early on 3 (their thinking closes in segment 2). Their
    answers could decide the vote, so they are answered at once, before segment 3: the
    last root, on its way to 4, could not overturn 3 to 0, so it is abandoned after
    segment 2; the answer is the one the whole tree votes for."""
    answers = {}
    for rule in ("never", "decided"):
        world = TreeWorld(testbed_tokens, write=_finishing(lambda j: j < 3))
        options = {"segment": 6, "roots": 4, "stop_margin": 0, "vote_stop": rule}
        ctx = _ctx(testbed_tokens, world, samples=4, options=options)
        progress, result = await _run(ctx)
        tree = result.info["tree"]
        answers[rule] = result.choices[0].content
        assert result.usage.completion_tokens == world.generated  # early answers billed once
        answer_calls = [c for c in _calls(ctx) if "-answer-" in c.request_id]
        if rule == "never":
            assert tree["settled_at"] is None and tree["leaves"] == 4 and tree["segments"] == 4
            assert sorted(result.info["leaf_answers"]) == ["3", "3", "3", "4"]
            continue
        assert tree["settled_at"] == 2 and tree["segments"] == 2 and tree["abandoned"] == 1
        assert tree["leaves"] == 3 and result.info["leaf_answers"] == ["3"] * 3
        assert len(answer_calls) == 1  # the three short paths are one distinct path
        assert tree["stopped_tokens"] == 12  # the long root's 2 segments, no leaf under it
        # Answered once segment 2 had closed their thinking, and no segment 3 was drawn.
        ids = [c.request_id for c in _calls(ctx)]
        assert ids[ids.index(answer_calls[0].request_id) - 1].startswith("r-t2-")
        assert not any(i.startswith("r-t3") for i in ids)
        assert progress[-1].data["settled"] is True and progress[-1].data["live"] == 0
    assert answers["never"] == answers["decided"] == "\n\\boxed{3}"


async def test_vote_stop_decided_waits_while_the_lead_could_be_overturned(
    testbed_tokens: Any,
) -> None:
    world = TreeWorld(testbed_tokens, write=_finishing(lambda j: j < 2))
    options = {"segment": 6, "roots": 4, "stop_margin": 0, "vote_stop": "decided"}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    _, result = await _run(ctx)
    tree = result.info["tree"]
    # 2 to 0 with two leaves to come: they might tie it, so every leaf finishes.
    assert tree["settled_at"] is None and tree["leaves"] == 4 and tree["abandoned"] == 0
    assert sorted(result.info["leaf_answers"]) == ["3", "3", "4", "4"]
    assert result.usage.completion_tokens == world.generated


async def test_vote_stop_likely_stops_on_a_probable_leader(testbed_tokens: Any) -> None:
    """Four of eight leaves agree (their thinking closes in segment 2): not decided (four
    to come), but P(Beta(5, 1) > 1/2) = 31/32 is above 0.95, and below 0.99. At 0.95 their
    answers could settle it, so they are answered before segment 3 and it settles after
    segment 2; at 0.99 they could not, so they are answered beside segment 3 and the tree
    grows on."""
    settled = {}
    for p in (0.95, 0.99):
        world = TreeWorld(testbed_tokens, write=_finishing(lambda j: j < 4))
        options = {
            "segment": 6,
            "roots": 8,
            "stop_margin": 0,
            "vote_stop": "likely",
            "vote_stop_p": p,
            "wave": 8,  # every leaf at once: the rule alone
        }
        ctx = _ctx(testbed_tokens, world, samples=8, options=options)
        _, result = await _run(ctx)
        settled[p] = result.info["tree"]["settled_at"]
        assert result.usage.completion_tokens == world.generated
    assert settled == {0.95: 2, 0.99: None}


async def test_vote_stop_grows_the_leaves_in_waves(testbed_tokens: Any) -> None:
    """N = 8 in waves of 4 (the default, N / 2): a first wave that agrees 4 to 0 settles
    the likely vote at 0.95, so the other four leaves are never drawn. At 0.99 even 4 to 0
    could not settle it, so the second wave, a tree of its own (two new roots from the
    prompt, forking into four leaves), starts as soon as the first wave's four leaves are
    all placed (after segment 3), beside the first wave's last segment, instead of a round
    after it; the first wave's answers are drawn beside the second wave's next segment."""
    shapes = {}
    for p in (0.95, 0.99):
        world = TreeWorld(testbed_tokens)
        options = {"segment": 6, "stop_margin": 0, "vote_stop": "likely", "vote_stop_p": p}
        ctx = _ctx(testbed_tokens, world, samples=8, options=options)
        _, result = await _run(ctx)
        tree = result.info["tree"]
        shapes[p] = (tree["wave"], tree["waves"], tree["leaves"])
        assert result.usage.completion_tokens == world.generated
        segs = _segments(ctx)
        assert _starts(ctx, segs[0]) == [(0, 2)]  # the first wave's roots
        if p == 0.99:
            # Segment 4: the first wave's four branches close their thinking, and the
            # second wave's roots start beside them; in segment 5 the first wave's
            # branches are done and only the second wave's grow.
            assert _starts(ctx, segs[2]) == [(12, 1), (12, 1), (12, 2)]
            assert _starts(ctx, segs[3]) == [(0, 2), (18, 1), (18, 1), (18, 1), (18, 1)]
            assert _starts(ctx, segs[4]) == [(6, 1), (6, 1)]
            # 4 to 0 could not settle at 0.99 whatever they answered, so the first wave's
            # leaves are answered beside the second wave's next segment, not before it.
            ids = [c.request_id for c in _calls(ctx)]
            first_answer = next(i for i in ids if "-answer-" in i)
            assert ids[ids.index(first_answer) - 1] == segs[4][-1].request_id
    assert shapes[0.95] == (4, 1, 4)
    # Every leaf agrees: the second wave settles before all of its leaves have finished.
    assert shapes[0.99][:2] == (4, 2) and 4 < shapes[0.99][2] < 8


def test_an_earlier_waves_branches_never_fork_and_stop_among_their_own() -> None:
    """Once the next wave has started, the free leaves are its own: an earlier wave's
    live branch, however unsure, continues as one; and each wave's branches are weighed
    for the early stop against their own wave's, not the deeper (weaker) earlier one's."""
    from strategies.search.paths import Path
    from strategies.tree.options import TreeOptions
    from strategies.tree.shape import ROOT, Node, Tree, allocate, stop_weak

    def node(parent: int, surprisal: float, worst: float) -> Node:
        return Node(
            path=Path(ids=(1,)), parent=parent, depth=1, new_tokens=1,
            surprisal=surprisal, worst=worst, logprob_sum=0.0, logprob_tokens=0,
        )  # fmt: skip

    options = TreeOptions(
        segment=6, unit="tokens", step_delimiter="\n", roots=None, branch=4, fork_above=1.0,
        fork_at="node", fork_depth=6, stop_margin=0.5, max_segments=64, align=0,
        vote="majority", vote_stop="likely", vote_stop_p=0.95, wave=4, next_wave_below=0.0,
    )  # fmt: skip
    # Nodes 0-1: the first wave's branches, the most unsure, and deep (their worst
    # segment is -3); nodes 2-3: the second wave's roots, unsure but less (worst -0.1, -0.2).
    nodes = [
        node(ROOT, 3.0, -3.0), node(ROOT, 3.0, -3.1), node(ROOT, 2.5, -0.1), node(ROOT, 2.0, -0.2)
    ]  # fmt: skip
    tree = Tree(nodes=nodes, live=[0, 1, 2, 3], segments=4, wave_start=3, wave_first=2)
    tree.surprisals = [1.0, 1.0, *(n.surprisal for n in nodes)]
    # 8 leaves, 4 live: this segment's share of the 4 free ones (1) forks the second
    # wave's most unsure root; the first wave's, unsurer still, continue as one.
    assert dict(allocate(tree, options, 8)) == {0: 1, 1: 1, 2: 2, 3: 1}
    tree.wave_first = 0
    assert dict(allocate(tree, options, 8)) == {0: 2, 1: 1, 2: 1, 3: 1}
    tree.wave_first = 2
    # Weighed together, both first-wave branches would be 2.8 nats below the median; each
    # wave against its own, nothing is that far from its median.
    assert stop_weak(tree, options) == []
    tree.wave_first = 0  # one wave of four: the two deep branches are the weak ones
    assert sorted(stop_weak(tree, options)) == [0, 1]


@pytest.mark.parametrize(
    ("samples", "vote_stop", "roots"),
    [(16, "never", 8), (16, "likely", 3), (32, "likely", 6), (32, "decided", 6), (8, "likely", 2)],
)
async def test_the_default_roots_are_half_the_leaves_or_three_eighths_of_a_wave(
    testbed_tokens: Any, samples: int, vote_stop: str, roots: int
) -> None:
    """N / 2 roots for a whole tree; with a vote stop, 3 / 8 of each wave's leaves (N / 2
    of them), rounded up, since a wave that may be the only one shares more."""
    world = TreeWorld(testbed_tokens)
    options = {"segment": 6, "stop_margin": 0, "vote_stop": vote_stop}
    ctx = _ctx(testbed_tokens, world, samples=samples, options=options)
    _, result = await _run(ctx)
    assert _starts(ctx, _segments(ctx)[0]) == [(0, roots)]
    assert result.info["tree"]["roots"] == roots


async def test_a_client_that_leaves_aborts_the_answers_beside_a_segment(
    testbed_tokens: Any,
) -> None:
    """With a vote stop, early leaves whose answers could not settle the vote (two of four:
    2 to 0 with two to come) are answered beside segment 3: a client that leaves then
    cancels both."""
    world = TreeWorld(testbed_tokens, write=_finishing(lambda j: j < 2))
    gate = asyncio.Event()
    cancelled: list[str] = []

    async def held(request: GenerateRequest) -> Sequence[Sample]:
        if request.request_id.startswith(("r-t3", "r-answer")):
            try:
                await gate.wait()
            except asyncio.CancelledError:
                cancelled.append(request.request_id)
                raise
        return await world(request)

    options = {"segment": 6, "roots": 4, "stop_margin": 0, "vote_stop": "decided"}
    ctx = _ctx(testbed_tokens, world, samples=4, options=options)
    ctx = replace(ctx, engine=ScriptedEngine(held, tokens=testbed_tokens))
    consumer = asyncio.ensure_future(_run(ctx))
    for _ in range(50):
        await asyncio.sleep(0)
    assert {"r-answer-0", "r-t3-0"} <= {c.request_id for c in _calls(ctx)}
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    # Both long roots' segment 3 and the answer, every held request.
    assert sorted(cancelled) == ["r-answer-0", "r-t3-0", "r-t3-1"]


def _classes(*counts: int) -> list[AnswerClass]:
    return [
        AnswerClass(answer=str(k), members=tuple(range(c)), rewards=(1.0,) * c, first_seen=k)
        for k, c in enumerate(counts)
    ]


@pytest.mark.parametrize(
    ("counts", "new", "to_come", "rule", "p", "could"),
    [
        ((), 3, 4, "decided", 0.95, True),  # 3 to 0 with one to come
        ((), 2, 4, "decided", 0.95, False),  # 2 to 0 with two to come: a tie is possible
        ((2, 1), 2, 4, "decided", 0.95, True),  # 4 to 1 with two to come
        ((2, 1), 1, 4, "decided", 0.95, False),  # 3 to 1 with three to come
        ((), 4, 8, "likely", 0.95, True),  # P(Beta(5, 1) > 1/2) = 31/32
        ((), 4, 8, "likely", 0.99, False),
        ((3,), 1, 8, "likely", 0.95, True),
        ((2, 2), 1, 8, "likely", 0.95, False),  # 3 to 2: 0.66
        ((), 4, 8, "never", 0.95, False),
        ((5,), 0, 8, "likely", 0.95, False),  # nothing new to answer
    ],
)
def test_could_settle_is_the_rule_if_every_new_leaf_joined_the_leader(
    counts: tuple[int, ...], new: int, to_come: int, rule: VoteStop, p: float, could: bool
) -> None:
    classes = _classes(*counts)
    assert could_settle(classes, new, to_come, rule=rule, weighted=False, p=p) is could
    if could:
        # The best case is the leader's: the same leaves for the runner-up settle nothing
        # the leader's would not.
        leader = _classes(*(c + (new if k == 0 else 0) for k, c in enumerate(counts or (0,))))
        assert settled(leader, to_come - new, rule=rule, weighted=False, p=p)


@pytest.mark.parametrize(
    ("counts", "coming", "to_come", "p", "chance"),
    [
        ((2, 1), 5, 13, 0.95, 5 * 0.6**4 * 0.4 + 0.6**5),  # 4 or 5 of 5 must join 3 of 5
        ((2, 1), 4, 13, 0.95, 0.6**4),  # 6 to 1 needs all four
        ((2, 2), 2, 8, 0.95, 0.0),  # 4 to 2 could not settle it whatever they answer
        ((4,), 3, 8, 0.95, 1.0),  # settled already: 31 / 32
        ((), 4, 8, 0.95, 1.0),  # nothing answered: no evidence against waiting
        ((), 2, 8, 0.95, 0.0),  # 2 to 0 could never settle it
    ],
)
def test_settle_chance_is_the_binomial_chance_enough_leaves_join_the_leader(
    counts: tuple[int, ...], coming: int, to_come: int, p: float, chance: float
) -> None:
    classes = _classes(*counts)
    got = settle_chance(classes, coming, to_come, rule="likely", weighted=False, p=p)
    assert got == pytest.approx(chance)
    assert (got > 0) is could_settle(classes, coming, to_come, rule="likely", weighted=False, p=p)


def test_lead_probability_is_the_beta_tail() -> None:
    assert lead_probability(0, 0) == 0.5
    assert lead_probability(3, 0) == 15 / 16
    assert lead_probability(4, 0) == 31 / 32
    for a in range(8):
        for b in range(8):
            assert lead_probability(a, b) + lead_probability(b, a) == pytest.approx(1.0)
            assert lead_probability(a + 1, b) > lead_probability(a, b)


@pytest.mark.parametrize(
    ("options", "budget", "param"),
    [
        ({"segment": 0}, {}, "segment"),
        ({"segment": "8"}, {}, "segment"),
        ({"segment_unit": "chars"}, {}, "segment_unit"),
        ({"branch": 0}, {}, "branch"),
        ({"roots": 5}, {"samples": 4}, "roots"),
        ({"branch": 1}, {"samples": 4}, "branch"),
        ({"vote": "loudest"}, {}, "vote"),
        ({"fork_above": -1}, {}, "fork_above"),
        ({"stop_margin": "big"}, {}, "stop_margin"),
        ({"fork_at": "leaf"}, {}, "fork_at"),
        ({"align": -32}, {}, "align"),
        ({"align": 1.5}, {}, "align"),
        ({"vote_stop": "sometimes"}, {}, "vote_stop"),
        ({"vote_stop": "likely", "vote_stop_p": 0.5}, {}, "vote_stop_p"),
        ({"vote_stop": "likely", "vote_stop_p": 1.5}, {}, "vote_stop_p"),
        ({"vote_stop": "decided", "vote_stop_p": 0.9}, {}, "vote_stop_p"),
        ({"wave": 4}, {}, "wave"),
        ({"vote_stop": "decided", "wave": 0}, {}, "wave"),
        ({"next_wave_below": 0.5}, {}, "next_wave_below"),
        ({"vote_stop": "likely", "next_wave_below": 1.5}, {}, "next_wave_below"),
        ({}, {"samples": 0}, "samples"),
        ({}, {"solution": 0}, "solution"),
    ],
)
def test_bad_options_are_400s_naming_them(
    testbed_tokens: Any, options: dict[str, Any], budget: dict[str, Any], param: str
) -> None:
    prompt = tuple(testbed_tokens.render_chat([{"role": "user", "content": QUESTION}]))
    request = StrategyRequest(
        request_id="r",
        prompt_token_ids=prompt,
        thinking_open=True,
        n=1,
        sampling=SamplingConfig(),
        budget=Budget(**budget),
        stream=False,
        options=options,
    )
    engine = ScriptedEngine(lambda r: [], tokens=testbed_tokens)
    with pytest.raises((InvalidRequest, InvalidBudget)) as err:
        TreeSampling().validate(request, engine)
    assert err.value.param == param


async def test_through_the_app_with_the_openai_sdk(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """The gateway around the strategy: the budget header, the ``thinkgate.tree`` object,
    a streamed run's progress per segment, and bad options as 400s naming them."""
    import openai

    world = TreeWorld(testbed_tokens)
    async with scripted_app(world) as app:
        client = app.openai()
        raw = await client.chat.completions.with_raw_response.create(
            model=app.model,
            messages=[{"role": "user", "content": QUESTION}],
            extra_headers={"X-Strategy": "tree", "X-Budget-Samples": "4"},
            extra_body={"segment": 6, "roots": 2, "align": 0},
        )
        r = raw.parse()
        assert raw.headers["x-budget-applied"] == "samples=4"
        tree = r.model_extra["thinkgate"]["tree"]  # type: ignore[index]
        assert tree["leaves"] == 4 and tree["roots"] == 2 and tree["shared_tokens"] > 0
        assert r.usage is not None and r.usage.completion_tokens == world.generated
        assert r.choices[0].message.content == "\n\\boxed{3}"
        events = []
        async with app.client.stream(
            "POST",
            "/v1/chat/completions",
            json={
                "model": app.model,
                "messages": [{"role": "user", "content": QUESTION}],
                "stream": True,
                "segment": 6,
                "align": 0,
            },
            headers={"X-Strategy": "tree", "X-Budget-Samples": "2"},
        ) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if line.startswith(": thinkgate.progress "):
                    events.append(json.loads(line.split(" ", 2)[2]))
        segments = [e["segment"] for e in events if "segment" in e]
        assert segments == list(range(1, len(segments) + 1)) and len(segments) >= 4
        for body, param in (({"segment": 0}, "segment"), ({"roots": 9}, "roots")):
            with pytest.raises(openai.BadRequestError) as err:
                await client.chat.completions.create(
                    model=app.model,
                    messages=[{"role": "user", "content": QUESTION}],
                    extra_headers={"X-Strategy": "tree", "X-Budget-Samples": "4"},
                    extra_body=body,
                )
            assert err.value.body["param"] == param  # type: ignore[index]


async def test_a_deadline_already_spent_still_answers(testbed_tokens: Any) -> None:
    """No time for a first segment: no branch is drawn, the answer follows the prompt."""
    import time

    from core.allowance import Allowance, Limits

    world = TreeWorld(testbed_tokens)
    ctx = _ctx(testbed_tokens, world, samples=4)
    ctx = replace(ctx, allowance=Allowance(limits=Limits(deadline=time.perf_counter() - 1)))
    _, result = await _run(ctx)
    assert _segments(ctx) == []
    assert result.choices[0].content == "\n\\boxed{0}"
    assert result.info["tree"]["leaves"] == 1 and result.info["tree"]["segments"] == 0
    assert ctx.allowance.stopped == "deadline"
