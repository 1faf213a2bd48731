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
import math
import statistics
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Final

from core.allowance import BudgetSpent
from core.base import JSON, Progress, Result, StrategyContext, StrategyRequest, Usage
from core.engine import Engine, GenerateRequest, Sample, TokenLogprob
from core.errors import BackendError, InvalidRequest
from strategies.pool import answer_keys
from strategies.pool import defaults_of as sampling_defaults_of
from strategies.search.paths import (
    Answered,
    Ledger,
    Path,
    StepPlan,
    answer,
    answer_choice,
    count_tokens,
    drawn_answer,
    force_close,
    grow,
    room_after,
    split_of,
    step_plan,
    thinking_request,
    thinking_used,
)
from strategies.search_options import check_budgets
from strategies.search_options import defaults_of as search_defaults_of
from strategies.selection import AnswerClass, build_classes, top_by_count, top_by_weight
from strategies.tree.options import BODY_OPTIONS, TreeOptions, tree_options
from strategies.tree.vote import could_settle, settle_chance, settled

ROOT: Final = -1  # the parent of the roots: the prompt
TEXT_CHARS: Final = 120  # the live view shows what a segment said; this keeps events small


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A node of the tree: a path that grew by one segment from its parent."""

    path: Path
    parent: int  # index of the parent node; ROOT: grew from the prompt
    depth: int  # segments from the prompt (1: a root)
    new_tokens: int  # what its own segment generated
    surprisal: float  # its segment's mean -logprob per token
    worst: float  # the lowest mean logprob of any segment on its path
    logprob_sum: float  # over every token on its path
    logprob_tokens: int
    # Its own segment's sampled-token logprobs (fork_at token splits it at the lowest).
    own_logprobs: tuple[float, ...] = ()

    @property
    def confidence(self) -> float:
        """exp(mean token logprob over its path): 1 when nothing was measured."""
        if not self.logprob_tokens:
            return 1.0
        return math.exp(self.logprob_sum / self.logprob_tokens)


@dataclass(slots=True)
class Tree:
    """One request's tree as it grows: every node drawn, and which are live, leaves, or
    stopped early."""

    nodes: list[Node] = field(default_factory=list)
    live: list[int] = field(default_factory=list)
    leaves: list[int] = field(default_factory=list)
    stopped: list[int] = field(default_factory=list)
    surprisals: list[float] = field(default_factory=list)  # every segment's
    pivots: list[float] = field(default_factory=list)  # every segment's least sure token's
    segments: int = 0  # engine rounds
    forks: int = 0  # nodes that drew more than one child
    fallbacks: int = 0  # segments drawn again from before them (no branch was live)
    # vote_stop: leaves answered as they finished, and the segment the vote settled in.
    answered: dict[int, Answered] = field(default_factory=dict)
    # Leaves whose last segment ran on into the answer and was cut there: the answer so far.
    drawn: dict[int, tuple[int, ...]] = field(default_factory=dict)
    within: int = 0  # leaves whose answer began in their last segment's call
    settled_at: int | None = None
    abandoned: int = 0  # live branches the settled vote left
    waves: int = 1
    wave_start: int = 0  # the segments drawn before this wave's roots
    # This wave's first node: an earlier wave's live branches finish as one each.
    wave_first: int = 0

    def path_of(self, parent: int) -> Path:
        return Path() if parent == ROOT else self.nodes[parent].path

    def depth_of(self, parent: int) -> int:
        return 0 if parent == ROOT else self.nodes[parent].depth


def _samples(ctx: StrategyContext) -> int:
    samples = ctx.request.budget.samples
    return samples if samples is not None else sampling_defaults_of(ctx).samples


def _roots(options: TreeOptions, n: int) -> int:
    """The branches drawn from the prompt for ``n`` leaves (a wave's, with a vote stop)."""
    if options.fork_depth <= 1:
        return n  # every leaf placed at the first segment: independent samples
    if options.roots is not None:
        return min(n, options.roots)
    if options.vote_stop != "never":
        # A wave shares more than a whole tree: 3 / 8 of its leaves start at the prompt
        # (3 of 8 at N = 16). Measured on validation questions: 0.45x self-consistency's
        # tokens at its accuracy, against 0.51x and 8.5 points below with half (docs/tree.md).
        return min(n, math.ceil(3 * n / 8))
    return min(n, max(1, n // 2))


def wave_of(options: TreeOptions, n: int) -> int:
    """The leaves grown at a time: all N without a vote stop."""
    if options.vote_stop == "never":
        return n
    return min(n, options.wave if options.wave is not None else max(4, n // 2))


def _plan_of(ctx: StrategyContext, options: TreeOptions) -> StepPlan:
    """Segments stop at the end of thinking (and, in steps, at the delimiter)."""
    delimiter = options.step_delimiter if options.unit == "steps" else None
    return step_plan(ctx.engine.tokens, delimiter)


def _through(ctx: StrategyContext, options: TreeOptions, plan: StepPlan) -> StepPlan | None:
    """The plan of segments that run on past the end of thinking into the answer, or None
    where the answer needs a call of its own: a grammar, the client's stop sequences, a
    minimum length, or steps (their delimiter would end the answer too).
    A leaf's answer then begins in its last segment's call, in the same engine steps,
    instead of one more round; sampled the same (the answer call's settings are the
    segment's then), so the tree draws the same answers in fewer rounds."""
    s, tokens = ctx.request.sampling, ctx.engine.tokens
    if options.unit != "tokens" or not tokens.think_end_ids or s.structured is not None:
        return None
    if s.stop or s.stop_token_ids or s.min_tokens or s.ignore_eos:
        return None
    end = tokens.decode(tokens.think_end_ids)
    return replace(
        plan,
        stop_token_ids=tuple(t for t in plan.stop_token_ids if t != tokens.think_end_id),
        stop=tuple(x for x in plan.stop if x != end),
    )


def cut_answer(ctx: StrategyContext, before: Path, sample: Sample) -> tuple[Sample, Sample | None]:
    """A segment's ``sample`` drawn after ``before``, cut where its thinking ended: the
    thinking (with the end delimiter) and what it wrote after, the answer so far (None:
    the thinking did not end in it, or nothing came after)."""
    split = split_of(ctx, before.ids + sample.token_ids)
    k = split.closed_at - len(before.ids)  # the sample's tokens up to the end delimiter
    if not split.think_closed or k <= 0 or k >= len(sample.token_ids):
        return sample, None
    lps = sample.logprobs
    thinking = Sample(
        index=sample.index,
        token_ids=sample.token_ids[:k],
        finish_reason="stop",
        stop_reason=ctx.engine.tokens.think_end_id,  # as if it had stopped there
        logprobs=None if lps is None else lps[:k],
    )
    rest = Sample(
        index=sample.index,
        token_ids=sample.token_ids[k:],
        finish_reason=sample.finish_reason,
        stop_reason=sample.stop_reason,
    )
    return thinking, rest


def _cap(ctx: StrategyContext, options: TreeOptions, path: Path) -> int:
    """The next segment's ``max_tokens``: the segment, the context and ``max_tokens``,
    the thinking budget."""
    cap = min(
        aligned(options, len(ctx.request.prompt_token_ids) + len(path.ids)),
        room_after(ctx, path.ids),
    )
    budget = ctx.request.budget.thinking
    if budget is not None and ctx.engine.tokens.think_end_ids:
        cap = min(cap, budget - thinking_used(ctx, path))
    return cap


def aligned(options: TreeOptions, ids: int) -> int:
    """The next segment's length from ``ids`` tokens: ``segment``, or with ``align`` B (and
    a segment of B or more) the length nearest ``segment`` that leaves ``ids + length`` at
    1 past a multiple of B.
    vLLM caches whole blocks of what it computed, every token of a request but the last
    one sampled, and a new request recomputes at least its last token: a child sent
    ``kB + 1`` ids reads ``kB`` of them from the cache."""
    if options.align <= 0 or options.unit != "tokens" or options.segment < options.align:
        return options.segment  # shorter segments than a block: as asked, not aligned
    b = options.align
    first = (1 - ids) % b or b  # the shortest aligned length (1..b)
    below = first + b * max(0, (options.segment - first) // b)
    above = below + b
    return below if options.segment - below < above - options.segment else above


def _child(ctx: StrategyContext, plan: StepPlan, tree: Tree, parent: int, sample: Sample) -> Node:
    before = tree.path_of(parent)
    path = grow(ctx, plan, before, sample, reads_prm=False)
    lps = [t.logprob for t in sample.logprobs or ()]
    mean = sum(lps) / len(lps) if lps else 0.0
    above = tree.nodes[parent] if parent != ROOT else None
    return Node(
        path=path,
        parent=parent,
        depth=tree.depth_of(parent) + 1,
        new_tokens=len(sample.token_ids),
        surprisal=-mean,
        worst=mean if above is None else min(above.worst, mean),
        logprob_sum=(above.logprob_sum if above else 0.0) + sum(lps),
        logprob_tokens=(above.logprob_tokens if above else 0) + len(lps),
        own_logprobs=tuple(lps),
    )


def pivot(node: Node) -> tuple[int, float]:
    """Where the node's segment was least sure: the index of its least likely sampled
    token and that token's surprisal (-logprob); (0, 0.0) without logprobs."""
    lps = node.own_logprobs
    if not lps:
        return 0, 0.0
    k = min(range(len(lps)), key=lambda j: (lps[j], j))
    return k, -lps[k]


def split(ctx: StrategyContext, plan: StepPlan, tree: Tree, i: int) -> int:
    """Node ``i`` cut before its least sure token: a new *stem* node holds the tokens
    before it, ``i`` becomes the stem's child with the rest; returns the stem's index (the
    node's parent when the least sure token is its first). The tokens were generated once
    and stay counted once, on the two halves."""
    node = tree.nodes[i]
    k, _ = pivot(node)
    if k == 0:
        return node.parent
    own = node.path.ids[len(node.path.ids) - node.new_tokens :]
    lps = node.own_logprobs
    head = Sample(
        index=0,
        token_ids=own[:k],
        finish_reason="length",
        logprobs=tuple(TokenLogprob(t, lp) for t, lp in zip(own[:k], lps[:k], strict=True)),
    )
    stem = _child(ctx, plan, tree, node.parent, head)
    tree.nodes.append(stem)
    at = len(tree.nodes) - 1
    tree.nodes[i] = replace(node, parent=at, new_tokens=node.new_tokens - k, own_logprobs=lps[k:])
    return at


def stop_weak(tree: Tree, options: TreeOptions) -> list[int]:
    """The live nodes that stop early this segment (see the module's docstring). Each
    wave's are weighed against their own: an earlier wave's branches, deeper, have had
    more segments to be weak in."""
    if options.stop_margin <= 0:
        return []
    out: list[int] = []
    for earlier in (False, True):
        live = [i for i in tree.live if (i < tree.wave_first) == earlier]
        if len(live) < 2:
            continue
        worst = {i: tree.nodes[i].worst for i in live}
        floor = statistics.median(worst.values()) - options.stop_margin
        weak = sorted((i for i in live if worst[i] < floor), key=lambda i: worst[i])
        out += weak[: len(live) // 2]
    return out


def allocate(
    tree: Tree,
    options: TreeOptions,
    n: int,
    cut: Callable[[int], int] | None = None,
) -> list[tuple[int, int]]:
    """The next segment's draws: (parent node, children), every live node one child at
    least, free leaves given as forks to the most uncertain ones; with no live node, the
    fallback's redraws of the least sure segments so far. ``cut`` (fork_at token) splits
    a forking node before its least sure token and names the part before it."""
    free = n - len(tree.live) - len(tree.leaves)
    draws = dict.fromkeys(tree.live, 1)
    if free > 0 and tree.live:
        upcoming = tree.segments - tree.wave_start + 1  # within this wave
        forced = upcoming >= options.fork_depth
        quota = free if forced else math.ceil(free / (options.fork_depth - upcoming + 1))
        by_token = options.fork_at == "token"
        signals = tree.pivots if by_token else tree.surprisals
        mean = statistics.fmean(signals) if signals else 0.0

        def unsure(i: int) -> float:
            return pivot(tree.nodes[i])[1] if by_token else tree.nodes[i].surprisal

        # Stable: equal surprisal goes to the node drawn first.
        for i in sorted(tree.live, key=lambda i: -unsure(i)):
            if quota <= 0 or options.branch <= 1:
                break
            if i < tree.wave_first:
                continue  # an earlier wave's branch: the free leaves are this wave's
            if not forced and unsure(i) < options.fork_above * mean:
                break  # the rest are surer still: they continue as one
            extra = min(options.branch - 1, quota)
            if by_token:
                # The least sure token drawn again: siblings share every token before it.
                at = tree.nodes[i].parent if cut is None else cut(i)
                draws[at] = draws.get(at, 0) + extra
            elif options.fork_at == "parent":
                # The unsure segment drawn again beside it: siblings differ where the model
                # hesitated, instead of children inheriting what it chose there.
                parent = tree.nodes[i].parent
                draws[parent] = draws.get(parent, 0) + extra
            else:
                draws[i] += extra
            quota -= extra
    elif free > 0:
        # Fallback: no branch is live. Redraw, from the prefix before it, each segment the
        # model was least sure of (a node whose parent is still a thinking prefix).
        seen: set[int] = set()
        order = sorted(range(len(tree.nodes)), key=lambda i: -tree.nodes[i].surprisal)
        for i in order:
            if free <= 0:
                break
            parent = tree.nodes[i].parent
            if parent in seen or not tree.path_of(parent).live:
                continue
            seen.add(parent)
            take = min(max(1, options.branch), free)
            draws[parent] = take
            free -= take
        if draws:
            tree.fallbacks += 1
    return [(p, c) for p, c in draws.items()]


@dataclass(slots=True, kw_only=True)
class Grown:
    """What one segment did, for its progress event."""

    parents: list[int]
    children: list[list[int]]  # per parent, the nodes it grew
    stops: list[int]


class TreeSampling:
    name: ClassVar[str] = "tree"
    budget_fields: ClassVar[frozenset[str]] = frozenset({"samples", "thinking", "solution"})
    body_options: ClassVar[frozenset[str]] = BODY_OPTIONS
    streams_live: ClassVar[bool] = False
    # The answer after thinking is its own call (search_paths.answer), under the grammar.
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
        plan = _plan_of(ctx, options)
        through = _through(ctx, options, plan)
        tree, ledger = Tree(), Ledger()
        wave = wave_of(options, n)
        cap = wave  # the leaves the tree may hold so far
        draws: list[tuple[int, int]] = [(ROOT, _roots(options, wave))]
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
                yield Progress(data=self._event(ctx, tree, grown, []))
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
                draws = [*((i, 1) for i in tree.live), (ROOT, min(more, _roots(options, wave)))]
            else:
                draws = allocate(tree, options, cap, lambda i: split(ctx, plan, tree, i))
            yield Progress(data=self._event(ctx, tree, grown, draws))
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
            cap = _cap(ctx, options, path)
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
                node = _child(ctx, plan, tree, parent, sample)
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

    def _event(
        self,
        ctx: StrategyContext,
        tree: Tree,
        grown: Grown,
        draws: Sequence[tuple[int, int]],
    ) -> dict[str, JSON]:
        """A segment as the live view draws it (the step searches' shape: per node its
        parent among the segment's parents, its confidence as the reward, its children
        next segment as ``kept``: 0 stopped, above 1 forked)."""
        next_children = dict(draws)
        stopped = set(grown.stops)
        nodes: list[JSON] = []
        for at, group in enumerate(grown.children):
            for i in group:
                node = tree.nodes[i]
                finished = not node.path.live
                kept = 0 if i in stopped else 1 if finished else next_children.get(i, 0)
                own = node.path.ids[len(node.path.ids) - node.new_tokens :]
                text = ctx.engine.tokens.decode(own)
                nodes.append(
                    {
                        "parent": at,
                        "reward": round(math.exp(-node.surprisal), 6),
                        "kept": kept,
                        "finished": finished,
                        "text": text[:TEXT_CHARS],
                    }
                )
        best = max((tree.nodes[i].confidence for i in (*tree.live, *tree.leaves)), default=None)
        return {
            "segment": tree.segments,
            "step": tree.segments,
            "live": len(tree.live),
            "complete": len(tree.leaves),
            "forks": sum(1 for _, c in draws if c > 1),
            "stops": len(grown.stops),
            "best_score": None if best is None else round(best, 6),
            "settled": tree.settled_at is not None,
            "tree": nodes,
        }

    async def _result(
        self,
        ctx: StrategyContext,
        options: TreeOptions,
        n: int,
        tree: Tree,
        ledger: Ledger,
    ) -> Result:
        closed = force_close([tree.nodes[i].path for i in tree.live])
        for i, path in zip(tree.live, closed, strict=True):
            tree.nodes[i] = replace(tree.nodes[i], path=path)
        leaves = [*tree.leaves, *tree.live]
        tree.live = []
        if not leaves:
            # Nothing was drawn (the time or tokens ran out before the first segment; early
            # stops always leave a branch live): the answer comes straight after the prompt.
            empty = Node(
                path=force_close([Path()])[0],
                parent=ROOT,
                depth=1,
                new_tokens=0,
                surprisal=0.0,
                worst=0.0,
                logprob_sum=0.0,
                logprob_tokens=0,
            )
            tree.nodes.append(empty)
            leaves = [len(tree.nodes) - 1]
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
            every = [tree.answered[i] for i in leaves]
            texts, exact = self._votes(ctx, every)
            classes = build_classes(texts, confidences, exact=exact)
            best = max(range(len(leaves)), key=lambda j: (confidences[j], -j))
            if any(t is not None for t in texts):
                rule = top_by_weight if options.vote == "confidence" else top_by_count
                top = rule(classes, 1)[0]
                best = top.representative
            answered = every[best]
            total = sum(confidences) or 1.0
            info_votes = {
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
        info: dict[str, JSON] = {
            "strategy": self.name,
            "samples": n,
            "tree": self._shape(options, n, tree, leaves, ledger),
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

    def _shape(
        self, options: TreeOptions, n: int, tree: Tree, leaves: Sequence[int], ledger: Ledger
    ) -> dict[str, JSON]:
        """The tree's shape and where its tokens went (``usage`` sums ``tokens_per_segment``
        and ``answer_tokens``)."""
        depth = max((node.depth for node in tree.nodes), default=0)
        by_depth = [0] * depth
        for node in tree.nodes:
            by_depth[node.depth - 1] += node.new_tokens
        # Nodes some leaf grew from (its ancestors and itself): what the votes stand on.
        used: set[int] = set()
        for leaf in leaves:
            i = leaf
            while i != ROOT and i not in used:
                used.add(i)
                i = tree.nodes[i].parent
        on_leaves = sum(tree.nodes[i].new_tokens for i in used)
        flat = sum(len(tree.nodes[i].path.ids) for i in leaves)
        return {
            "segment": options.segment,
            "segment_unit": options.unit,
            "roots": _roots(options, wave_of(options, n)),
            "branch": options.branch,
            "fork_depth": options.fork_depth,
            "fork_at": options.fork_at,
            "align": options.align if options.segment >= options.align else 0,
            "segments": tree.segments,
            "nodes": len(tree.nodes),
            "forks": tree.forks,
            "stops": len(tree.stopped),
            "fallbacks": tree.fallbacks,
            "vote_stop": options.vote_stop,
            # The segment after which the answered leaves' vote was settled (None: not),
            # and the live branches it left unfinished (their tokens are in stopped_tokens).
            "settled_at": tree.settled_at,
            "abandoned": tree.abandoned,
            "wave": wave_of(options, n),
            "waves": tree.waves,
            "leaves": len(leaves),
            "depth": depth,
            "tokens_by_depth": by_depth,
            "tokens_per_segment": list(ledger.step_tokens),
            "answer_tokens": ledger.answer_tokens,
            # Leaves whose answer began in their last segment's call (no call of its own
            # unless that segment's end cut it).
            "answered_within": tree.within,
            # Thinking the leaves hold, as N independent samples would have generated it,
            # and what the tree generated for it: the difference is the shared prefixes.
            "leaf_tokens": flat,
            "shared_tokens": flat - on_leaves,
            # Generated on branches no leaf grew from (stopped early, and what they grew).
            "stopped_tokens": sum(
                node.new_tokens for i, node in enumerate(tree.nodes) if i not in used
            ),
            "engine_requests": ledger.engine_requests,
            "engine_prompt_tokens": ledger.engine_prompt_tokens,
            "engine_seconds": round(ledger.engine_s, 4),
        }
