"""What the tree reports: the live view's event for each segment and the ``tree`` object
of its result's info (its shape, and where its tokens went)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from core.base import JSON, StrategyContext
from strategies.search.paths import Ledger
from strategies.tree.options import TreeOptions
from strategies.tree.shape import ROOT, Grown, Tree, roots, wave_of

TEXT_CHARS: Final = 120  # the live view shows what a segment said; this keeps events small


def event(
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


def tree_info(
    options: TreeOptions, n: int, tree: Tree, leaves: Sequence[int], ledger: Ledger
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
        "roots": roots(options, wave_of(options, n)),
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
