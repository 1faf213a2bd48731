"""The step search with a process reward model: the loop the three strategies share.

Every step: all live paths are extended by one step in one engine round
(``search_paths.expand``), every new step is scored by the PRM in one batched call,
and the strategy's rule (:meth:`StepSearch.advance`) decides which paths go on. The
loop ends when the rule says so, no path is live, or ``max_steps`` is reached (live
paths are then closed by the gateway). A rule that ``speculates`` (particle filtering,
option ``speculate``) may have the next step drawn while the PRM scores this one
(``strategies.search.step_ahead``). Then the answer: the best finished path by its
aggregate PRM score (``select: best``, one answer generated) or a PRM-weighted vote
over every finished path (``select: vote``, one answer per distinct path).

Steps are thinking; the answer after it is its own engine request, so a request's
``response_format`` (or a forced ``tool_choice``) holds only that answer to its grammar,
and with ``tools`` offered an answer may be calls. Votes read answers as the sampling
strategies do (``strategies.pool.answer_keys``: canonical JSON, calls, or mathematics).

``beam-search``, ``particle-filtering`` and ``dvts`` subclass :class:`StepSearch`.
Usage counts every token generated, pruned candidates included; the PRM's own input
is reported in the ``thinkgate`` object (``prm_tokens``), not billed as completion.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from core.allowance import BudgetSpent
from core.base import (
    JSON,
    Progress,
    ResourceKey,
    Result,
    StrategyContext,
    StrategyRequest,
    Usage,
)
from core.engine import Engine
from core.errors import BackendUnavailable, InvalidRequest
from strategies.pool import SamplingDefaults, answer_keys
from strategies.pool import defaults_of as sampling_defaults_of
from strategies.prm import RESOURCE_KEY as PRM_KEY
from strategies.prm import ProcessRewardModel, aggregate
from strategies.search.path_answers import Answered, answer, answer_choice
from strategies.search.paths import (
    Ledger,
    Path,
    StepPlan,
    expand,
    force_close,
    score,
    score_closings,
    settle,
    split_of,
    step_plan,
)
from strategies.search.step_ahead import Ahead
from strategies.search_options import (
    SearchDefaults,
    SearchOptions,
    check_budgets,
    search_options,
)
from strategies.search_options import defaults_of as search_defaults_of
from strategies.selection import AnswerClass, build_classes, top_by_weight

COMMON_OPTIONS: Final = frozenset(
    {
        "step_delimiter",
        "max_steps",
        "max_step_tokens",
        "aggregate",
        "select",
        "confidence",
        "reward",
    }
)


@dataclass(frozen=True, slots=True)
class SearchState:
    """Paths still growing, and finished ones (closed, forced or ended)."""

    live: tuple[Path, ...]
    complete: tuple[Path, ...] = ()


@dataclass(slots=True, kw_only=True)
class Search:
    """One request's search as it runs: what every step needs, and what it spent."""

    ctx: StrategyContext
    prm: ProcessRewardModel | None  # None: steps rewarded by the generator's certainty
    options: SearchOptions
    n: int
    plan: StepPlan
    rng: random.Random
    ledger: Ledger = field(default_factory=Ledger)
    steps: int = 0  # engine rounds, over every search of the request
    rounds: int = 1  # searches run one after another (step-rejection's adaptive draw)


def _resolve_prm(ctx: StrategyContext) -> ProcessRewardModel:
    prm = ctx.resources.get(PRM_KEY)
    if prm is None:
        raise BackendUnavailable(
            "this strategy needs a process reward model and none is attached to this "
            "server (start it with --prm-model DIR or --prm-url URL)",
            param="strategy",
            code="resource_unavailable",
        )
    return prm


def _samples_of(ctx: StrategyContext) -> int:
    request = ctx.request
    defaults: SamplingDefaults = sampling_defaults_of(ctx)
    return request.budget.samples if request.budget.samples is not None else defaults.samples


def path_score(path: Path, options: SearchOptions) -> float:
    return aggregate(path.rewards, options.aggregate)


def best_index(paths: Sequence[Path], options: SearchOptions) -> int:
    """The highest aggregate score; ties to the first."""
    return max(range(len(paths)), key=lambda i: (path_score(paths[i], options), -i))


class StepSearch:
    """Base of the PRM-guided searches: the loop, the answer, the result."""

    name: ClassVar[str] = ""
    budget_fields: ClassVar[frozenset[str]] = frozenset({"samples", "thinking", "solution"})
    body_options: ClassVar[frozenset[str]] = COMMON_OPTIONS
    streams_live: ClassVar[bool] = False
    # The answer after thinking is generated on its own (path_answers.answer), under the
    # grammar; the steps before it never are.
    honours_response_format: ClassVar[bool] = True
    honours_tools: ClassVar[bool] = True
    # The rule may take the next step drawn while the PRM scores this one (the option
    # ``speculate``: strategies.search.step_ahead); a rule whose candidates per parent vary by
    # step, or which needs every candidate's score before it draws, cannot.
    speculates: ClassVar[bool] = False
    # Resources it cannot run without: ``auto`` leaves its plans out where one is missing.
    needs: ClassVar[tuple[ResourceKey[Any], ...]] = (PRM_KEY,)

    # --- the rule, per strategy -------------------------------------------------------
    def check(self, n: int, options: SearchOptions) -> None:
        """Rule-specific checks of N and the options (400s)."""

    def start(self, ctx: StrategyContext, n: int, options: SearchOptions) -> SearchState:
        """The paths the search begins with: N at the root, by default."""
        return SearchState(live=(Path(),) * n)

    def per_parent(self, options: SearchOptions) -> int:
        """Candidates drawn from each live path per step."""
        raise NotImplementedError

    def advance(
        self,
        state: SearchState,
        children: Sequence[Sequence[Path]],
        n: int,
        options: SearchOptions,
        rng: random.Random,
    ) -> SearchState:
        """The next state from every live path's scored candidates (in live order)."""
        raise NotImplementedError

    def done(self, state: SearchState, n: int) -> bool:
        return not state.live

    def trace(self, n: int, options: SearchOptions) -> dict[str, JSON]:
        return {}

    # --- shared ------------------------------------------------------------------------
    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        check_budgets(request)
        options = search_options(request, SearchDefaults())
        if request.budget.samples is not None:
            self.check(request.budget.samples, options)
        if not engine.tokens.encode(options.step_delimiter):
            raise InvalidRequest(
                "step_delimiter encodes to no token for this model", param="step_delimiter"
            )
        if request.sampling.structured is not None and not engine.tokens.think_end_ids:
            raise InvalidRequest(
                f"response_format under {self.name} holds the answer after thinking to the "
                "format, and this model does not think (its steps are its answer); use "
                "plain or a sampling strategy",
                param="response_format",
            )

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[Progress | Result, None]:
        search = self.begin(ctx)
        finished: list[Path] = []
        begun = self.start(ctx, search.n, search.options)
        async for event in self.search(search, begun, finished):
            yield event
        yield await self.result(search, finished)

    def begin(self, ctx: StrategyContext) -> Search:
        """The request's search: its PRM, options, N, step plan, seeded draw and ledger."""
        options = search_options(ctx.request, search_defaults_of(ctx))
        prm = _resolve_prm(ctx) if options.reward == "prm" else None
        n = _samples_of(ctx)
        self.check(n, options)
        seed = ctx.request.sampling.seed
        return Search(
            ctx=ctx,
            prm=prm,
            options=options,
            n=n,
            plan=step_plan(ctx.engine.tokens, options.step_delimiter),
            rng=random.Random(seed) if seed is not None else random.Random(),
        )

    async def search(
        self, search: Search, begun: SearchState, finished: list[Path]
    ) -> AsyncGenerator[Progress, None]:
        """Steps from ``begun`` until the rule stops (or ``max_steps`` of them); every
        finished path, scored on its end, is appended to ``finished``."""
        ctx, options, n, ledger = search.ctx, search.options, search.n, search.ledger
        settled = [settle(ctx, p) for p in begun.live]  # a thinking budget of 0: answer now
        state = SearchState(
            live=tuple(p for p in settled if p.live),
            complete=begun.complete + tuple(p for p in settled if not p.live),
        )
        steps = 0
        ahead: Ahead | None = None  # the next step, drawn while the PRM scores this one
        step_s = 0.0  # the last step's wall time: the next one is not started without it
        try:
            while not self.done(state, n):
                if steps >= options.max_steps:
                    break
                began = time.perf_counter()
                children = await self._drawn(search, state, ahead, step_s)
                ahead = None
                if children is None:
                    break  # the limits end the search: answer from the paths so far
                flat = [c for group in children for c in group]
                scoring = score(ctx, search.prm, flat, ledger, confidence=options.confidence)
                if self.speculates and options.speculate and steps + 1 < options.max_steps:
                    ahead = Ahead.start(search, flat)
                scored = await scoring
                if ahead is not None:
                    ahead.scored(scored)
                regrouped = _regrouped(children, scored)
                state = self.advance(state, regrouped, n, options, search.rng)
                step_s = time.perf_counter() - began
                steps += 1
                search.steps += 1
                ledger.survivors.append(len(state.live))
                yield Progress(data=_step_event(search, regrouped, state, finished))
            if ahead is not None:
                # Drawn for a step that will not come: its tokens were generated, so they
                # are counted (into the last step), then dropped.
                await ahead.children(())
                ahead = None
        finally:
            if ahead is not None:  # the request failed or its client left
                await ahead.cancel()
        finished += await score_closings(
            ctx,
            search.prm,
            list(state.complete) + force_close(state.live),
            ledger,
            confidence=options.confidence,
        )

    async def _drawn(
        self, search: Search, state: SearchState, ahead: Ahead | None, step_s: float
    ) -> list[list[Path]] | None:
        """This step's candidates, per live path: drawn now, or (``ahead``) drawn while
        the PRM scored the last step. None: the request's limits leave no room for it."""
        ctx, options = search.ctx, search.options
        if ahead is not None:
            return await ahead.children(state.live)
        rows = len(state.live) * self.per_parent(options)
        if (why := ctx.allowance.short(1, rows, seconds=step_s)) is not None:
            ctx.allowance.stop(why)  # answer from the paths so far
            return None
        try:
            return await expand(
                ctx, search.plan, options, state.live, self.per_parent(options), search.ledger
            )
        except BudgetSpent as spent:
            ctx.allowance.stop(spent.reason)
            return None

    def vote(
        self, search: Search, finished: Sequence[Path], every: Sequence[Answered]
    ) -> tuple[list[str | None], tuple[AnswerClass, ...]]:
        """The answers of ``every`` finished path and their PRM-weighted classes."""
        ctx, tokens = search.ctx, search.ctx.engine.tokens
        scores = [path_score(p, search.options) for p in finished]
        texts, exact = answer_keys(
            ctx.request, [tokens.decode(split_of(ctx, a.ids).content_ids) for a in every]
        )
        return list(texts), build_classes(texts, scores, exact=exact)

    async def result(
        self,
        search: Search,
        finished: list[Path],
        every: Sequence[Answered] | None = None,
        extra: dict[str, JSON] | None = None,
    ) -> Result:
        """The response from the finished paths (``every``: their answers, when the
        strategy generated them already)."""
        ctx, options, n, ledger = search.ctx, search.options, search.n, search.ledger
        scores = [path_score(p, options) for p in finished]
        best, answered, votes = await self._chosen(search, finished, scores, every)
        choice = answer_choice(ctx, answered)
        info: dict[str, JSON] = {
            "strategy": self.name,
            "samples": n,
            **self.trace(n, options),
            **self._spent(search, finished),
            "chosen_step_rewards": [round(r, 6) for r in answered.path.rewards],
            "chosen_score": round(scores[best], 6),
            "path_scores": [round(s, 6) for s in scores],
            **(extra or {}),
        }
        if votes is not None:
            info["path_answers"], info["classes"] = votes
        usage = Usage(
            prompt_tokens=len(ctx.request.prompt_token_ids) * search.rounds,
            completion_tokens=ledger.completion_tokens,
            reasoning_tokens=ledger.reasoning_tokens,
        )
        return Result(
            choices=(choice,), usage=usage, samples=sum(ledger.candidates) or 1, info=info
        )

    async def _chosen(
        self,
        search: Search,
        finished: list[Path],
        scores: Sequence[float],
        every: Sequence[Answered] | None,
    ) -> tuple[int, Answered, tuple[list[JSON], list[JSON]] | None]:
        """The chosen path (its index in ``finished``) and its answer; with a vote, also
        every path's answer and the classes, for the ``thinkgate`` object."""
        ctx, options, ledger = search.ctx, search.options, search.ledger
        if every is None and (why := ctx.allowance.short(len(finished))) is not None:
            # The limits leave room for one answer, not one per path: the best path's.
            ctx.allowance.stop(why)
            best = best_index(finished, options)
            return best, (await answer(ctx, [finished[best]], ledger))[0], None
        if options.select == "best" and every is None:
            best = best_index(finished, options)
            return best, (await answer(ctx, [finished[best]], ledger))[0], None
        if every is None:
            every = await answer(ctx, finished, ledger)
        texts, classes = self.vote(search, finished, every)
        if options.select == "vote" and any(a is not None for a in texts):
            top = top_by_weight(classes, 1)[0]
            best = top.representative
        else:
            best = best_index(finished, options)
        total = sum(scores) or 1.0
        classes_info: list[JSON] = [
            {
                "answer": c.answer,
                "count": c.count,
                "weight": round(sum(c.rewards) / total, 6),
                "selected": best in c.members,
            }
            for c in classes
        ]
        return best, every[best], (list(texts), classes_info)

    def _spent(self, search: Search, finished: Sequence[Path]) -> dict[str, JSON]:
        """The search's options and what it spent, for the ``thinkgate`` object."""
        options, ledger = search.options, search.ledger
        return {
            "aggregate": options.aggregate,
            "select": options.select,
            "confidence": options.confidence,
            "reward": options.reward,
            "max_steps": options.max_steps,
            "steps": search.steps,
            "candidates_per_step": list(ledger.candidates),
            "survivors_per_step": list(ledger.survivors),
            # What usage sums, so a client can audit it: every candidate, every answer.
            "tokens_per_step": list(ledger.step_tokens),
            "answer_tokens": ledger.answer_tokens,
            "complete_paths": sum(1 for p in finished if p.state in ("closed", "ended")),
            "forced_paths": sum(1 for p in finished if p.state == "forced"),
            "engine_requests": ledger.engine_requests,
            "engine_prompt_tokens": ledger.engine_prompt_tokens,
            "prm_calls": ledger.prm_calls,
            "prm_tokens": ledger.prm_tokens,
            # Where the request's time went: waits, one after the other (with speculate
            # the engine draws during the PRM's wait; only the wait after it is the engine's).
            "engine_seconds": round(ledger.engine_s, 4),
            "prm_seconds": round(ledger.prm_s, 4),
            **(
                {"ahead_used": ledger.ahead_used, "ahead_dropped": ledger.ahead_dropped}
                if options.speculate and self.speculates
                else {}
            ),
        }


def _regrouped(children: Sequence[Sequence[Path]], scored: Sequence[Path]) -> list[list[Path]]:
    """The scored candidates (flat, in order) grouped again by the live path they grew
    from."""
    regrouped: list[list[Path]] = []
    at = 0
    for group in children:
        regrouped.append(list(scored[at : at + len(group)]))
        at += len(group)
    return regrouped


def _step_event(
    search: Search,
    regrouped: Sequence[Sequence[Path]],
    state: SearchState,
    finished: Sequence[Path],
) -> dict[str, JSON]:
    """A step's progress event: the search so far, and the step as the live view draws it."""
    best = max(
        (path_score(p, search.options) for p in (*state.live, *state.complete, *finished)),
        default=None,
    )
    return {
        "step": search.steps,
        "candidates": search.ledger.candidates[-1],
        "live": len(state.live),
        "complete": len(state.complete) + len(finished),
        "best_score": None if best is None else round(best, 6),
        "tree": step_tree(search.ctx, regrouped, state),
    }


# The live view shows what a step said; a step is a line or two, this keeps events small.
STEP_TEXT_CHARS = 120


def step_tree(
    ctx: StrategyContext,
    children: Sequence[Sequence[Path]],
    after: SearchState,
) -> list[JSON]:
    """One step of the search as the live view draws it: per candidate, the live path it
    grew from (its index in the step's live paths), the PRM's reward of its new step,
    how many copies of it the rule kept (0: pruned; above 1: resampled), whether it has
    finished, and the step's text."""
    kept: dict[int, int] = {}
    for p in (*after.live, *after.complete):
        kept[id(p)] = kept.get(id(p), 0) + 1
    # The parents are the groups' order: the step's live path g grew children[g].
    tree: list[JSON] = []
    for parent, group in enumerate(children):
        for c in group:
            text = ctx.engine.tokens.decode(c.steps[-1]) if c.steps else ""
            tree.append(
                {
                    "parent": parent,
                    "reward": round(c.rewards[-1], 6) if c.rewards else None,
                    "kept": kept.get(id(c), 0),
                    "finished": not c.live,
                    "text": text[:STEP_TEXT_CHARS],
                }
            )
    return tree
