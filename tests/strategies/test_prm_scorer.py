"""``scorer: "prm"`` without an engine: how a sample is cut into the steps a search would
have generated, its lowest step reward as its score, one batched PRM call per pool, and
best-of-n's ``select: vote`` (summed scores) against ``best`` (mean score) on a scripted
engine."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

import pytest

import testbed
from core.base import Resources, Result, StrategyContext, StrategyRequest
from core.budget import Budget
from core.engine import GenerateRequest, Sample, SamplingConfig
from core.errors import BackendUnavailable, InvalidRequest
from engines.scripted import ScriptedEngine
from engines.tokens import TokenizerTokens
from strategies.pool import DEFAULTS_KEY as SAMPLING_KEY
from strategies.pool import SamplingDefaults
from strategies.prm import RESOURCE_KEY as PRM_KEY
from strategies.prm import ProcessRewardModel
from strategies.reasoning import thinking_open_after
from strategies.sampling.base import resolve_scorer
from strategies.sampling.best_of_n import BestOfN
from strategies.sampling.prm_scorer import PrmScorer, cut, sample_steps
from strategies.scorers import MeanLogprob, ScoreQuery
from strategies.search_options import DEFAULTS_KEY, SearchDefaults

NL = 47  # the testbed tokenizer's newline: step delimiter and PRM step tag


@pytest.fixture(scope="module")
def tokens() -> TokenizerTokens:
    return TokenizerTokens.load(str(testbed.model_path("base")))


def _prompt(tokens: TokenizerTokens) -> tuple[int, ...]:
    return tuple(tokens.render_chat([{"role": "user", "content": "Compute 3+8-5 mod 10."}]))


def _sample(tokens: TokenizerTokens, text: str, index: int = 0, eos: bool = True) -> Sample:
    ids = (*tokens.encode(text), *(tokens.eos_token_ids[:1] if eos else ()))
    return Sample(index=index, token_ids=ids, finish_reason="stop")


def _query(tokens: TokenizerTokens, *samples: Sample) -> ScoreQuery:
    prompt = _prompt(tokens)
    return ScoreQuery(
        prompt_token_ids=prompt,
        samples=samples,
        tokens=tokens,
        thinking_open=thinking_open_after(prompt, tokens),
    )


class LinePrm:
    """A scripted PRM backend: each step's reward from a table of its text (0.5 when not
    in it); records every batch."""

    def __init__(self, tokens: TokenizerTokens, table: dict[str, float]) -> None:
        self.tokens = tokens
        self.table = table
        self.batches: list[list[str]] = []

    async def step_rewards(self, sequences: Sequence[Sequence[int]]) -> list[list[float]]:
        self.batches.append([_text(self.tokens, s) for s in sequences])
        out = []
        for seq in sequences:
            rewards, line = [], []
            for tok in seq:
                if tok == NL:  # a tag: the line before it is a step (the prompt's too)
                    rewards.append(self.table.get(_text(self.tokens, line), 0.5))
                    line = []
                else:
                    line.append(tok)
            out.append(rewards)
        return out


def _text(tokens: TokenizerTokens, ids: Sequence[int]) -> str:
    """``ids`` as text, the end-of-thinking delimiter (a special token) written out."""
    end = tuple(tokens.think_end_ids)
    ids = tuple(ids)
    if ids[len(ids) - len(end) :] == end:
        return tokens.decode(ids[: len(ids) - len(end)]) + "</think>"
    return tokens.decode(ids)


def _decoded(tokens: TokenizerTokens, steps: Sequence[Sequence[int]]) -> list[str]:
    return [_text(tokens, s) for s in steps]


def test_cut_keeps_the_piece_after_the_last_delimiter() -> None:
    assert cut((1, 9, 2, 3, 9), (9,)) == [(1,), (2, 3), ()]
    assert cut((1, 8, 9, 2), (8, 9)) == [(1,), (2,)]
    assert cut((), (9,)) == [()]


def test_steps_are_the_searchs_steps(tokens: TokenizerTokens) -> None:
    def steps(text: str, eos: bool = True) -> list[str]:
        q = _query(tokens, _sample(tokens, text, eos=eos))
        return _decoded(tokens, sample_steps(q, q.samples[0], (NL,)))

    assert q_open(tokens)
    # Closed after a newline: the closing step is the end delimiter alone.
    assert steps("3+8=1\n1-5=6\n</think>\n\\boxed{6}") == ["3+8=1", "1-5=6", "</think>"]
    # Closed mid-line: that line and the close are one step; blank lines are no steps.
    assert steps("3+8=1\n\n1-5=6</think>\\boxed{6}") == ["3+8=1", "1-5=6</think>"]
    # Never closed (cut by the length limit): the last piece is a step of its own.
    assert steps("3+8=1\n1-5", eos=False) == ["3+8=1", "1-5"]


def q_open(tokens: TokenizerTokens) -> bool:
    """The testbed's chat template opens the thinking in the prompt."""
    return thinking_open_after(_prompt(tokens), tokens)


async def test_a_samples_score_is_its_lowest_step_reward(tokens: TokenizerTokens) -> None:
    prm = LinePrm(tokens, {"3+8=1": 0.9, "1-5=6": 0.8, "1-5=7": 0.1, "</think>": 0.7})
    scorer = PrmScorer(ProcessRewardModel(model=prm, step_tag_id=NL), delimiter=(NL,))
    query = _query(
        tokens,
        _sample(tokens, "3+8=1\n1-5=6\n</think>\n\\boxed{6}", 0),
        _sample(tokens, "3+8=1\n1-5=7\n</think>\n\\boxed{7}", 1),
        _sample(tokens, "</think>\n\\boxed{2}", 2),  # its only step is the close
        _sample(tokens, "", 3),  # nothing the PRM could judge
    )
    assert await scorer.score(query) == [0.7, 0.1, 0.7, 0.0]
    assert len(prm.batches) == 1 and len(prm.batches[0]) == 3  # one call, the empty left out


async def test_a_sample_longer_than_the_prms_context_loses_its_last_steps(
    tokens: TokenizerTokens,
) -> None:
    prm = LinePrm(tokens, {"3+8=1": 0.9, "1-5=7": 0.1})
    model = ProcessRewardModel(model=prm, step_tag_id=NL)
    query = _query(tokens, _sample(tokens, "3+8=1\n1-5=7\n</think>", eos=False))
    fits_one = len(model.sequence(query.prompt_token_ids, [tokens.encode("3+8=1")]))
    short = ProcessRewardModel(model=prm, step_tag_id=NL, max_len=fits_one)
    assert await PrmScorer(short, delimiter=(NL,)).score(query) == [0.9]
    assert await PrmScorer(model, delimiter=(NL,)).score(query) == [0.1]


async def test_a_prompt_past_the_prms_context_is_the_requests_400(
    tokens: TokenizerTokens,
) -> None:
    prm = LinePrm(tokens, {"3+8=1": 0.9})
    query = _query(tokens, _sample(tokens, "3+8=1\n</think>", eos=False))
    short = ProcessRewardModel(model=prm, step_tag_id=NL, max_len=len(query.prompt_token_ids))
    with pytest.raises(InvalidRequest, match="process reward model reads"):
        await PrmScorer(short, delimiter=(NL,)).score(query)
    assert prm.batches == []


# best-of-n over a scripted pool: two samples answer 6 through steps the PRM rates 0.8,
# one answers 5 through a step it rates 0.95. By mean score (``best``) 5 wins; by summed
# score (``vote``) 6 wins, 1.6 to 0.95.
POOL = ("1-5=6\n</think>\\boxed{6}", "1-5=6\n</think>\\boxed{6}", "1-5=5\n</think>\\boxed{5}")
TABLE = {"1-5=6": 0.8, "1-5=5": 0.95, "</think>": 1.0}


def _ctx(
    tokens: TokenizerTokens,
    options: dict[str, Any],
    prm: LinePrm | None,
    *,
    scorer: str | None = None,
) -> StrategyContext:
    async def engine(request: GenerateRequest) -> list[Sample]:
        return [_sample(tokens, POOL[j], j) for j in range(request.sampling.n)]

    prompt = _prompt(tokens)
    request = StrategyRequest(
        request_id="r",
        prompt_token_ids=prompt,
        thinking_open=thinking_open_after(prompt, tokens),
        n=1,
        sampling=SamplingConfig(),
        budget=Budget(samples=len(POOL)),
        stream=False,
        options=options,
    )
    items: dict[str, object] = {
        DEFAULTS_KEY.name: SearchDefaults(step_delimiter="\n"),
        SAMPLING_KEY.name: SamplingDefaults(scorer=scorer),
    }
    if prm is not None:
        items[PRM_KEY.name] = ProcessRewardModel(model=prm, step_tag_id=NL)
    return StrategyContext(
        engine=ScriptedEngine(engine, tokens=tokens),
        request=request,
        resources=Resources(items=items),
    )


async def _answer(ctx: StrategyContext) -> tuple[str, dict[str, Any]]:
    strategy = BestOfN()
    strategy.validate(ctx.request, ctx.engine)
    gen: AsyncGenerator[Any, None] = strategy.run(ctx)
    async for event in gen:
        if isinstance(event, Result):
            return str(event.choices[0].info["answer"]), dict(event.info)
    raise AssertionError("no result")


@pytest.mark.parametrize(("select", "answer"), [("best", "5"), ("vote", "6")])
async def test_best_of_n_with_the_prm_best_or_vote(
    tokens: TokenizerTokens, select: str, answer: str
) -> None:
    prm = LinePrm(tokens, TABLE)
    got, info = await _answer(_ctx(tokens, {"scorer": "prm", "select": select}, prm))
    assert info["scorer"] == "prm"
    assert info["rule"] == ("weighted-majority" if select == "vote" else "best-of-n")
    assert got == answer, info["classes"]
    assert [c["mean_reward"] for c in info["classes"]] == [0.8, 0.95]
    assert len(prm.batches) == 1  # the pool scored in one PRM call


async def test_vote_needs_scores_that_are_weights(tokens: TokenizerTokens) -> None:
    ctx = _ctx(tokens, {"scorer": "logprob", "select": "vote"}, LinePrm(tokens, TABLE))
    with pytest.raises(InvalidRequest, match="select") as err:
        await _answer(ctx)
    assert err.value.param == "select"


async def test_bad_select_and_a_missing_prm(tokens: TokenizerTokens) -> None:
    ctx = _ctx(tokens, {"scorer": "prm", "select": "sum"}, LinePrm(tokens, TABLE))
    with pytest.raises(InvalidRequest):
        BestOfN().validate(ctx.request, ctx.engine)
    with pytest.raises(BackendUnavailable, match="--prm-model") as err:
        await _answer(_ctx(tokens, {"scorer": "prm"}, None))
    assert err.value.code == "resource_unavailable"


async def test_the_servers_default_scorer_can_be_the_prm(tokens: TokenizerTokens) -> None:
    """``--default-scorer prm``: a request naming no scorer gets the PRM (a weighted vote
    allowed); without a PRM attached, the scorer set's fallback (logprob)."""
    prm = LinePrm(tokens, TABLE)
    ctx = _ctx(tokens, {"select": "vote"}, prm, scorer="prm")
    got, info = await _answer(ctx)
    assert info["scorer"] == "prm" and info["rule"] == "weighted-majority"
    assert got == "6" and len(prm.batches) == 1
    named = resolve_scorer(_ctx(tokens, {"scorer": "logprob"}, prm, scorer="prm"))
    assert isinstance(named, MeanLogprob)
    assert isinstance(resolve_scorer(_ctx(tokens, {}, None, scorer="prm")), MeanLogprob)
    assert isinstance(resolve_scorer(_ctx(tokens, {}, prm, scorer="prm")), PrmScorer)
    # The server's default left as it was: the scorer set decides (logprob without one).
    assert isinstance(resolve_scorer(_ctx(tokens, {}, prm)), MeanLogprob)
