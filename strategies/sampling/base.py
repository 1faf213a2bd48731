"""The base class of the three sampling strategies: draw N samples, score them, select.

``self-consistency``, ``best-of-n`` and ``best-of-majority`` differ only in their
selection rule (``SamplingStrategy.select``); the pool they draw from (one engine
request with ``n = N``, a progress event per finished sample) is ``strategies.pool``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import ClassVar, Final

from core.base import (
    JSON,
    Progress,
    Result,
    StrategyContext,
    StrategyRequest,
)
from core.engine import (
    Engine,
)
from core.errors import BackendUnavailable, InvalidBudget
from strategies.json_answers import ANSWER_FIELD, answer_field
from strategies.pool import (
    Pool,
    analyse,
    budget_info,
    defaults_of,
    draw,
    final_event,
    option_scorer,
    requested_k,
    requested_samples,
    score,
    start_draw,
    validate_common,
)
from strategies.prm import RESOURCE_KEY as PRM_KEY
from strategies.sampling.adaptive_draw import Drawn, StopRule, draw_adaptive, with_round_prompts
from strategies.sampling.prm_scorer import PrmScorer
from strategies.scorers import RESOURCE_KEY as SCORERS_KEY
from strategies.scorers import MeanLogprob, Scorer, ScorerSet
from strategies.search_options import defaults_of as search_defaults_of
from strategies.selection import AnswerClass, Selection, build_classes, select_weighted
from strategies.voting import (
    VoteOptions,
    confidence_shares,
    trace_confidences,
    vote_options,
    voting_classes,
)


def resolve_scorer(ctx: StrategyContext) -> Scorer:
    """The scorer the request names (or the server default). One the server has not
    attached is a 503 before any engine call (``resource_unavailable``, naming the flag
    that provides it): the request is right, the server lacks it. ``logprob`` always
    exists."""
    name = option_scorer(ctx.request)
    prm_attached = ctx.resources.get(PRM_KEY) is not None
    if name is None and defaults_of(ctx).scorer == "prm" and prm_attached:
        name = "prm"  # the server's default; without a PRM, the scorer set's fallback
    scorers = ctx.resources.get(SCORERS_KEY) or ScorerSet()
    scorer = _prm_scorer(ctx) if name == "prm" else scorers.get(name)
    if scorer is not None:
        return scorer
    if name in (None, "logprob"):
        return MeanLogprob()
    raise BackendUnavailable(
        f"scorer {name!r} is not available on this server: {_PROVIDED_BY.get(name, name)}",
        param="scorer",
        code="resource_unavailable",
    )


def _prm_scorer(ctx: StrategyContext) -> Scorer | None:
    """The step searches' PRM (a resource of its own, not in the scorer set), over the
    server's step delimiter; None when the server has none."""
    prm = ctx.resources.get(PRM_KEY)
    if prm is None:
        return None
    delimiter = ctx.engine.tokens.encode(search_defaults_of(ctx).step_delimiter)
    return PrmScorer(prm, delimiter=delimiter)


# What attaches each optional scorer (``server.resources.scoring``), for the 503 above.
_PROVIDED_BY: Final = {
    "reward": "no reward model with the served model's tokenizer is attached (start it with "
    "--reward-model DIR or --reward-url URL)",
    "verifier": "no verifier is configured (start it with --verifier-url URL)",
    "prm": "no process reward model with the served model's tokenizer is attached (start "
    "it with --prm-model DIR or --prm-url URL)",
}


class SamplingStrategy:
    """Base of the three sampling strategies: draw, (score), select, answer."""

    name: ClassVar[str] = ""
    budget_fields: ClassVar[frozenset[str]] = frozenset(
        {"samples", "k", "thinking", "solution", "thinking_min"}
    )
    streams_live: ClassVar[bool] = False
    # The chosen samples' logprobs, when the client asks for them.
    returns_logprobs: ClassVar[bool] = True
    # JSON answers (response_format): voted on as canonical JSON (or ``answer_field``).
    honours_response_format: ClassVar[bool] = True
    # Tool calls vote as their canonical (name, arguments) (strategies.tool_calls).
    honours_tools: ClassVar[bool] = True
    uses_scorer: ClassVar[bool] = True
    uses_alpha: ClassVar[bool] = False
    uses_vote: ClassVar[bool] = False  # takes the ``vote`` options (strategies.voting)
    # elastic_mode applies with token budgets (per-sample elastic plans).
    body_options: ClassVar[frozenset[str]] = frozenset({"elastic_mode", "scorer", ANSWER_FIELD})

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        validate_common(
            request,
            engine,
            uses_scorer=self.uses_scorer,
            uses_alpha=self.uses_alpha,
            uses_vote=self.uses_vote,
        )
        answer_field(request)  # only with response_format: a 400 before any engine call

    def select(
        self, ctx: StrategyContext, classes: Sequence[AnswerClass], k: int, total: int
    ) -> tuple[Selection, Mapping[str, JSON]]:
        """The rule; returns the selection and rule-specific ``thinkgate`` fields."""
        raise NotImplementedError

    def check_scorer(self, ctx: StrategyContext, scorer: Scorer | None) -> None:
        """Before any engine call: whether the rule can use ``scorer``'s scores."""

    def adaptive(self, request: StrategyRequest) -> StopRule | None:
        """The rule that stops the draw early (``strategies.sampling.adaptive_draw``); None: draw
        all N at once."""
        return None

    def select_by_confidence(
        self,
        ctx: StrategyContext,
        classes: Sequence[AnswerClass],
        k: int,
        shares: Mapping[int, float],
    ) -> tuple[Selection, Mapping[str, JSON]]:
        """The rule under a confidence vote (``uses_vote``): weighted majority by default."""
        return select_weighted(classes, k), {}

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[Progress | Result, None]:
        request = ctx.request
        k = requested_k(request)
        n = requested_samples(request, defaults_of(ctx))
        if k > n:
            raise InvalidBudget(f"k={k} exceeds samples={n}", param="k")
        scorer = resolve_scorer(ctx) if self.uses_scorer else None
        self.check_scorer(ctx, scorer)
        votes = vote_options(request) if self.uses_vote else VoteOptions()
        stop = self.adaptive(request)
        rewards: list[float] | None
        drawn: Drawn | None = None
        if stop is not None and (scorer is not None or not self.uses_scorer):
            drawn = Drawn(stop=stop, cap=n)
            async for progress in draw_adaptive(ctx, scorer, drawn):
                yield progress
            source, analysed = drawn.first, drawn.analysed
            rewards = drawn.rewards if scorer is not None else None  # a majority: unweighted
        else:
            source = start_draw(
                ctx,
                n,
                logprobs=scorer is not None and scorer.needs_logprobs,
                top_logprobs=votes.top_k if votes.needs_confidence else 0,
            )
            pool = Pool(samples=[])
            async for progress in draw(source, pool):
                yield progress
            analysed = analyse(ctx, pool.samples)
            rewards = await score(ctx, scorer, analysed) if scorer is not None else None
        extra: Mapping[str, JSON]
        if votes.needs_confidence:
            # DeepConf offline: confidence-weighted votes. Without a scorer the weights
            # stand in for rewards; with one (Best-of-Majority) they weigh the filter.
            confidences = trace_confidences(analysed.samples, votes.window)
            if rewards is None:
                rewards = confidences
            classes = voting_classes(
                analysed.answers, confidences, votes, rewards=rewards, exact=analysed.exact
            )
            selection, extra = self.select_by_confidence(
                ctx, classes, k, confidence_shares(classes, confidences)
            )
            extra = {**extra, "vote": votes.vote, "window": votes.window, "top_k": votes.top_k}
            extra["sample_confidences"] = [round(c, 6) for c in confidences]
            if votes.vote == "confidence-top":
                extra = {**extra, "vote_filter": votes.share}
        else:
            classes = build_classes(analysed.answers, rewards, exact=analysed.exact)
            selection, extra = self.select(ctx, classes, k, len(analysed.samples))
        info: dict[str, JSON] = {
            "strategy": self.name,
            "samples": len(analysed.samples),
            "engine_requests": source.engine_requests,
            "k": k,
            "scorer": scorer.name if scorer is not None else None,
            **extra,
        }
        if drawn is not None:
            info["engine_requests"] = drawn.engine_requests
            info["adaptive"] = drawn.info()
        if source.plan is not None:
            info["per_sample_budget"] = budget_info(ctx, analysed, source)
        result = final_event(ctx, analysed, rewards, classes, selection, source.plan, info)
        if drawn is not None:
            result = with_round_prompts(ctx, result, drawn.rounds)
        yield result
