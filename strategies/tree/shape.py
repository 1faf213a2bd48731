"""The tree's shape, pure functions: its nodes, where a segment ends, how a segment's
samples become nodes, and where the next segment forks, stops and splits (see
``strategies.tree.sampler`` for the method). Nothing here calls the engine: the sampler
draws, these decide."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

from core.base import StrategyContext
from core.engine import Sample, TokenLogprob
from strategies.search.path_answers import Answered
from strategies.search.paths import (
    Path,
    StepPlan,
    force_close,
    grow,
    room_after,
    split_of,
    step_plan,
    thinking_used,
)
from strategies.tree.options import TreeOptions

ROOT: Final = -1  # the parent of the roots: the prompt


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


def roots(options: TreeOptions, n: int) -> int:
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


def segment_plan(ctx: StrategyContext, options: TreeOptions) -> StepPlan:
    """Segments stop at the end of thinking (and, in steps, at the delimiter)."""
    delimiter = options.step_delimiter if options.unit == "steps" else None
    return step_plan(ctx.engine.tokens, delimiter)


def through_plan(ctx: StrategyContext, options: TreeOptions, plan: StepPlan) -> StepPlan | None:
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


def segment_cap(ctx: StrategyContext, options: TreeOptions, path: Path) -> int:
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


def child(ctx: StrategyContext, plan: StepPlan, tree: Tree, parent: int, sample: Sample) -> Node:
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
    stem = child(ctx, plan, tree, node.parent, head)
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


def close_leaves(tree: Tree) -> list[int]:
    """The tree's leaves at its end: the finished ones, then the live branches closed
    where they are (no longer live). With none at all, one empty leaf: the answer then
    comes straight after the prompt."""
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
    return leaves
