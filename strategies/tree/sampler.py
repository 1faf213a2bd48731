"""``tree``: tree sampling (TreePO's segment tree). Branch where the model is unsure,
share every prefix, stop weak branches early; the leaves vote.

Li et al. 2025 (TreePO) sample a tree instead of N independent traces. Here, for one
request of N leaves (the samples budget):

- Thinking is decoded in *segments* (option ``segment``: that many tokens, or with
  ``segment_unit: steps`` one step ending at ``step_delimiter``). Every segment of every
  live branch is one engine round; a node with c children this segment is one engine
  request with ``n = c`` on its ids, so the prefix the children share is in vLLM's prefix
  cache and is generated (and billed) once. With ``align`` B (32 by default) a segment
  ends where the next request's ids are one past a multiple of B: vLLM caches whole
  blocks, so each segment's request then reads all its ids but the last from the cache.
- **Forks follow the model's uncertainty.** A segment's uncertainty is its *surprisal*,
  the mean of -logprob over its sampled tokens (asked of the engine with the segment, no
  extra call): an unbiased estimate of the mean entropy of the model's next-token
  distributions along the segment, without the top-k logprobs of every position that the
  entropy itself would need. After each segment, while leaves are still free (N minus
  the live branches and finished leaves), the live nodes whose last segment's surprisal
  is at least ``fork_above`` times the mean of every segment so far fork, the most
  uncertain first, into up to ``branch`` children, within a share of the free leaves
  spread over the first ``fork_depth`` segments; a sure node continues as one. Where the
  children start is ``fork_at``: after the node's segment (TreePO's fork), the segment
  drawn again from its parent, or (``token``) from the segment's least likely token on.
- **Early stop.** A live node whose weakest segment (lowest mean logprob, as DeepConf's
  lowest group confidence) is more than ``stop_margin`` nats per token below the median
  weakest segment of the live nodes beside it stops; at most half of them stop in a
  segment, and the most confident never does. Its leaf is free again.
- **Fallback.** From segment ``fork_depth`` on, free leaves go to the live nodes whatever
  their uncertainty (most uncertain first); when no branch is live and leaves are still
  free (branches finished or stopped early), the segments the model was least sure of are
  drawn again from the prefix before them, so N leaves arrive.
- Finished leaves are answered after their thinking (one engine request per distinct
  path, under the solution budget and the request's grammar, as the step searches do) and
  vote: plain majority, or (``vote: confidence``) each weighted by its confidence, the
  exponential of its mean token logprob. Answers are read as every vote reads them
  (``strategies.pool.answer_keys``).

- **Vote stop** (``vote_stop``, off by default): leaves are answered as they finish
  (before the next segment when their answers could settle the vote, else beside it),
  and grow in waves of ``wave``, each a tree from the prompt with 3 / 8 of its leaves as
  roots; the tree stops once their vote is settled (``strategies.tree.vote``). The next
  wave starts as soon as the current one cannot settle the vote (it has finished, or its
  leaves to come could not settle it even all joining the leader), beside the current
  wave's last branches, which finish as one each.

With ``roots`` = N (or ``fork_depth`` 1) it is N independent samples: self-consistency.
Usage counts every generated token once (a shared prefix was generated once); the
``thinkgate`` object reports the tree: segments, forks, stops, leaves, tokens by depth,
and where the tokens went.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from typing import ClassVar

from core.allowance import BudgetSpent
from core.base import JSON, Progress, Result, StrategyContext, StrategyRequest, Usage
from core.engine import Engine, GenerateRequest, Sample
from core.errors import BackendError, InvalidRequest
from strategies.pool import answer_keys
from strategies.pool import defaults_of as sampling_defaults_of
from strategies.search.path_answers import Answered, answer, answer_choice, drawn_answer
from strategies.search.paths import (
    Ledger,
    StepPlan,
    count_tokens,
    split_of,
    thinking_request,
)
from strategies.search_options import check_budgets
from strategies.search_options import defaults_of as search_defaults_of
from strategies.selection import AnswerClass, build_classes, top_by_count, top_by_weight
from strategies.tree.options import BODY_OPTIONS, TreeOptions, tree_options
from strategies.tree.report import event, tree_info
from strategies.tree.shape import (
    ROOT,
    Grown,
    Tree,
    allocate,
    child,
    close_leaves,
    cut_answer,
    pivot,
    roots,
    segment_cap,
    segment_plan,
    split,
    stop_weak,
    through_plan,
    wave_of,
)
from strategies.tree.vote import could_settle, settle_chance, settled


def _samples(ctx: StrategyContext) -> int:
    samples = ctx.request.budget.samples
    return samples if samples is not None else sampling_defaults_of(ctx).samples


class TreeSampling:
    name: ClassVar[str] = "tree"
    budget_fields: ClassVar[frozenset[str]] = frozenset({"samples", "thinking", "solution"})
    body_options: ClassVar[frozenset[str]] = BODY_OPTIONS
    streams_live: ClassVar[bool] = False
    # The answer after thinking is its own call (path_answers.answer), under the grammar.
    honours_response_format: ClassVar[bool] = True
    honours_tools: ClassVar[bool] = True

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        check_budgets(
            request,
            one_answer="tree returns one answer (its leaves' vote)",
            drawn_by="tree",
            unit="segment",
        )
        options = tree_options(request, default_delimiter="\n\n")
        if options.unit == "steps" and not engine.tokens.encode(options.step_delimiter):
            raise InvalidRequest(
                "step_delimiter encodes to no token for this model", param="step_delimiter"
            )
        n = request.budget.samples
        if options.branch == 1 and n is not None and (options.roots or 1) < n:
            raise InvalidRequest(
                "branch 1 never forks, so the tree has only its roots as leaves: set roots "
                f"to the samples budget ({n}) or branch to 2 or more",
                param="branch",
            )
        if request.sampling.structured is not None and not engine.tokens.think_end_ids:
            raise InvalidRequest(
                "response_format under tree holds the answer after thinking to the format, "
                "and this model does not think; use plain or a sampling strategy",
                param="response_format",
            )

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[Progress | Result, None]:
        request = ctx.request
        options = tree_options(request, default_delimiter=search_defaults_of(ctx).step_delimiter)
        n = _samples(ctx)
        plan = segment_plan(ctx, options)
        through = through_plan(ctx, options, plan)
        tree, ledger = Tree(), Ledger()
        wave = wave_of(options, n)
        cap = wave  # the leaves the tree may hold so far
        draws: list[tuple[int, int]] = [(ROOT, roots(options, wave))]
        round_s = 0.0
        while draws:
            if tree.segments >= options.max_segments:
                break
            rows = sum(c for _, c in draws)
            if (why := ctx.allowance.short(1, rows, seconds=round_s)) is not None:
                ctx.allowance.stop(why)  # answer from the leaves and branches so far
                break
            began = time.perf_counter()
            # vote_stop: the leaves that finished last segment are answered beside this
            # one, in the same engine steps, instead of in a round of their own.
            answering = self._unanswered(ctx, options, tree)
            beside = (
                asyncio.ensure_future(self._answer(ctx, tree, ledger, answering))
                if answering
                else None
            )
            try:
                grown = await self._segment(ctx, plan, through, options, tree, ledger, draws)
                if beside is not None:
                    await beside
            except BudgetSpent as spent:
                ctx.allowance.stop(spent.reason)
                break
            finally:
                if beside is not None and not beside.done():
                    beside.cancel()  # the client left, or the budget ran out
                    # Its engine request is aborted before the strategy returns.
                    await asyncio.gather(beside, return_exceptions=True)
            round_s = time.perf_counter() - began
            if await self._settled(ctx, options, n, tree, ledger):
                yield Progress(data=event(ctx, tree, grown, []))
                break
            if cap < n and self._wave_spent(ctx, options, n, tree, cap):
                # The vote is open and this wave cannot close it (see _wave_spent): the
                # next wave, a tree of its own from the prompt (branches of this one would
                # repeat its errors), starts now. This wave's live branches finish beside
                # it as one each; its leaves not answered yet are answered beside its
                # first segment.
                more = min(n, cap + wave) - cap
                cap += more
                tree.waves += 1
                tree.wave_start = tree.segments
                tree.wave_first = len(tree.nodes)
                draws = [*((i, 1) for i in tree.live), (ROOT, min(more, roots(options, wave)))]
            else:
                draws = allocate(tree, options, cap, lambda i: split(ctx, plan, tree, i))
            yield Progress(data=event(ctx, tree, grown, draws))
        yield await self._result(ctx, options, n, tree, ledger)

    async def _segment(
        self,
        ctx: StrategyContext,
        plan: StepPlan,
        through: StepPlan | None,
        options: TreeOptions,
        tree: Tree,
        ledger: Ledger,
        draws: Sequence[tuple[int, int]],
    ) -> Grown:
        """One engine round: every draw's children, then the early stops. With ``through``
        a segment runs on into its answer when its thinking ends, unless the solution
        budget is below the segment (the answer could then outrun it in the call)."""
        requests: list[GenerateRequest] = []
        tree.segments += 1
        solution = ctx.request.budget.solution
        runs_on: list[bool] = []  # per request: whether it may run on into answers
        for g, (parent, count) in enumerate(draws):
            path = tree.path_of(parent)
            cap = segment_cap(ctx, options, path)
            runs_on.append(through is not None and (solution is None or solution >= cap))
            requests.append(
                thinking_request(
                    ctx,
                    ledger,
                    through if through is not None and runs_on[-1] else plan,
                    request_id=f"{ctx.request.request_id}-t{tree.segments}-{g}",
                    ids=path.ids,
                    n=count,
                    max_tokens=cap,
                    # The sampled tokens' own logprobs: the signal, where it is read.
                    logprobs=options.reads_signal,
                )
            )
        tree.forks += sum(1 for _, c in draws if c > 1)
        t0 = time.perf_counter()
        results = await ctx.engine.generate_batch(requests)
        ledger.engine_s += time.perf_counter() - t0
        parents = [p for p, _ in draws]
        children: list[list[int]] = []
        live: list[int] = []
        tokens = 0
        for (parent, _), req, on, samples in zip(draws, requests, runs_on, results, strict=True):
            if len(samples) != req.sampling.n:
                raise BackendError(f"engine returned {len(samples)} of {req.sampling.n} samples")
            ledger.engine_requests += 1
            ledger.engine_prompt_tokens += len(req.prompt_token_ids)
            mine: list[int] = []
            for drawn in samples:
                # Only a call that ran on can hold an answer (the others stop at the end).
                sample, rest = cut_answer(ctx, tree.path_of(parent), drawn) if on else (drawn, None)
                node = child(ctx, plan, tree, parent, sample)
                count_tokens(ctx, ledger, tree.path_of(parent), node.path)
                tokens += node.new_tokens
                tree.nodes.append(node)
                tree.surprisals.append(node.surprisal)
                tree.pivots.append(pivot(node)[1])
                index = len(tree.nodes) - 1
                mine.append(index)
                (live if node.path.live else tree.leaves).append(index)
                if rest is not None:
                    self._began(ctx, tree, ledger, index, rest)
            children.append(mine)
        ledger.candidates.append(sum(len(c) for c in children))
        ledger.step_tokens.append(tokens)
        tree.live = live
        stops = stop_weak(tree, options)
        if stops:
            tree.stopped += stops
            tree.live = [i for i in tree.live if i not in stops]
        return Grown(parents=parents, children=children, stops=stops)

    async def _settled(
        self, ctx: StrategyContext, options: TreeOptions, n: int, tree: Tree, ledger: Ledger
    ) -> bool:
        """vote_stop: whether the answered leaves' vote is settled; if so the live
        branches stop (abandoned) and the tree is done. The leaves that finished this
        segment are answered now, before another segment, when their answers could settle
        the vote (another segment of the live branches, or the next wave, would then be
        drawn for nothing); otherwise the vote stays open whatever they answer, and they
        are answered beside the next segment (or the next wave's first)."""
        if options.vote_stop == "never":
            return False
        rule, weighted, p = options.vote_stop, options.vote == "confidence", options.vote_stop_p
        new = self._unanswered(ctx, options, tree)
        to_come = n - len(tree.answered)  # finished but unanswered leaves are still to come
        if new and self._could_settle(ctx, options, tree, len(new), to_come):
            await self._answer(ctx, tree, ledger, new)
            to_come = n - len(tree.answered)
        if not settled(self._classes(ctx, tree), to_come, rule=rule, weighted=weighted, p=p):
            return False
        tree.settled_at = tree.segments
        tree.abandoned = len(tree.live)
        tree.live = []
        return True

    @staticmethod
    def _began(ctx: StrategyContext, tree: Tree, ledger: Ledger, leaf: int, rest: Sample) -> None:
        """Leaf ``leaf``'s answer as its last segment wrote it: answered if it ended there,
        else its beginning, which the leaf's answer call goes on from."""
        ids = rest.token_ids
        ledger.completion_tokens += len(ids)
        ledger.answer_tokens += len(ids)
        tree.within += 1
        if rest.finish_reason == "stop":
            tree.answered[leaf] = drawn_answer(ctx, tree.nodes[leaf].path, ids, "stop")
        else:
            tree.drawn[leaf] = ids

    def _wave_spent(
        self, ctx: StrategyContext, options: TreeOptions, n: int, tree: Tree, cap: int
    ) -> bool:
        """Whether the next wave starts now: this one has finished; or, with a vote stop,
        every leaf of it is placed (live or finished) and the ones still to come (live, or
        finished and not answered) could not settle the vote even if every one joined the
        leader, or are unlikely to (their chance below ``next_wave_below``). The next wave
        would then be drawn anyway, or probably: waiting for them adds rounds."""
        if not tree.live:
            return len(tree.leaves) >= cap  # else the fallback draws its free leaves
        if options.vote_stop == "never" or len(tree.leaves) + len(tree.live) < cap:
            return False
        coming = len(self._unanswered(ctx, options, tree)) + len(tree.live)
        chance = settle_chance(
            self._classes(ctx, tree), coming, n - len(tree.answered), rule=options.vote_stop,
            weighted=options.vote == "confidence", p=options.vote_stop_p,
        )  # fmt: skip
        return chance == 0.0 or chance < options.next_wave_below

    def _could_settle(
        self, ctx: StrategyContext, options: TreeOptions, tree: Tree, joining: int, to_come: int
    ) -> bool:
        """tree_vote.could_settle on the answered leaves' vote, under the request's rule."""
        return could_settle(
            self._classes(ctx, tree), joining, to_come, rule=options.vote_stop,
            weighted=options.vote == "confidence", p=options.vote_stop_p,
        )  # fmt: skip

    def _classes(self, ctx: StrategyContext, tree: Tree) -> Sequence[AnswerClass]:
        """The answered leaves' vote."""
        leaves = list(tree.answered)
        texts, exact = self._votes(ctx, [tree.answered[i] for i in leaves])
        return build_classes(texts, [tree.nodes[i].confidence for i in leaves], exact=exact)

    @staticmethod
    def _unanswered(ctx: StrategyContext, options: TreeOptions, tree: Tree) -> list[int]:
        """vote_stop: the finished leaves not answered yet, if their answers fit (else
        none: the end answers what it can)."""
        if options.vote_stop == "never":
            return []
        new = [i for i in tree.leaves if i not in tree.answered]
        return new if new and ctx.allowance.short(len(new)) is None else []

    @staticmethod
    async def _answer(ctx: StrategyContext, tree: Tree, ledger: Ledger, leaves: list[int]) -> None:
        paths = [tree.nodes[i].path for i in leaves]
        got = await answer(ctx, paths, ledger, [tree.drawn.get(i, ()) for i in leaves])
        tree.answered.update(zip(leaves, got, strict=True))

    @staticmethod
    def _votes(
        ctx: StrategyContext, answered: Sequence[Answered]
    ) -> tuple[tuple[str | None, ...], bool]:
        """What each answered leaf votes as (as every vote reads answers)."""
        tokens = ctx.engine.tokens
        return answer_keys(
            ctx.request, [tokens.decode(split_of(ctx, a.ids).content_ids) for a in answered]
        )

    async def _result(
        self,
        ctx: StrategyContext,
        options: TreeOptions,
        n: int,
        tree: Tree,
        ledger: Ledger,
    ) -> Result:
        leaves = close_leaves(tree)
        rest = [i for i in leaves if i not in tree.answered]
        short = ctx.allowance.short(len(rest)) if rest else None
        if short is not None and tree.answered:
            # No room for the rest's answers: the vote of the leaves answered already.
            ctx.allowance.stop(short)
            leaves, rest = [i for i in leaves if i in tree.answered], []
        confidences = [tree.nodes[i].confidence for i in leaves]
        info_votes: dict[str, JSON] = {}
        if short is not None and rest:
            # Room for one answer, not one per leaf: the most confident leaf's.
            ctx.allowance.stop(short)
            best = max(range(len(leaves)), key=lambda j: (confidences[j], -j))
            leaf = leaves[best]
            path, drawn = tree.nodes[leaf].path, tree.drawn.get(leaf, ())
            answered: Answered = (await answer(ctx, [path], ledger, [drawn]))[0]
        else:
            if rest:
                await self._answer(ctx, tree, ledger, rest)
            best, answered, info_votes = self._vote(ctx, options, tree, leaves, confidences)
        info: dict[str, JSON] = {
            "strategy": self.name,
            "samples": n,
            "tree": tree_info(options, n, tree, leaves, ledger),
            "vote": options.vote,
            "leaf_confidences": [round(c, 6) for c in confidences],
            "chosen_confidence": round(confidences[best], 6),
            **info_votes,
        }
        usage = Usage(
            prompt_tokens=len(ctx.request.prompt_token_ids),
            completion_tokens=ledger.completion_tokens,
            reasoning_tokens=ledger.reasoning_tokens,
        )
        choice = answer_choice(ctx, answered)
        return Result(choices=(choice,), usage=usage, samples=len(leaves), info=info)

    def _vote(
        self,
        ctx: StrategyContext,
        options: TreeOptions,
        tree: Tree,
        leaves: Sequence[int],
        confidences: Sequence[float],
    ) -> tuple[int, Answered, dict[str, JSON]]:
        """The answered leaves' vote: the chosen leaf (its index in ``leaves``), its
        answer, and the vote for the result's info (each leaf's answer, the classes)."""
        every = [tree.answered[i] for i in leaves]
        texts, exact = self._votes(ctx, every)
        classes = build_classes(texts, confidences, exact=exact)
        best = max(range(len(leaves)), key=lambda j: (confidences[j], -j))
        if any(t is not None for t in texts):
            rule = top_by_weight if options.vote == "confidence" else top_by_count
            top = rule(classes, 1)[0]
            best = top.representative
        total = sum(confidences) or 1.0
        info_votes: dict[str, JSON] = {
            "leaf_answers": list(texts),
            "classes": [
                {
                    "answer": c.answer,
                    "count": c.count,
                    "weight": round(sum(c.rewards) / total, 6),
                    "selected": best in c.members,
                }
                for c in classes
            ],
        }
        return best, every[best], info_votes
