"""The options of ``tree`` (tree sampling), checked and typed: a bad value is a 400 naming
its field, before any engine call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from core import options
from core.base import StrategyRequest
from core.errors import InvalidRequest
from strategies.tree.vote import VOTE_STOPS, VoteStop

Unit = Literal["tokens", "steps"]
Vote = Literal["majority", "confidence"]
ForkAt = Literal["node", "parent", "token"]
FORK_ATS: Final = ("node", "parent", "token")
UNITS: Final = ("tokens", "steps")
VOTES: Final = ("majority", "confidence")

# The defaults, chosen on 32 of the testbed's validation questions at N = 16 (docs/tree.md):
# a segment of 32 tokens is five of its lines, aligned to 32-token cache blocks (a
# multiple of vLLM's 16 on GPUs and thinkgate's 32 on CPUs), half of the leaves start at
# the prompt, the rest are placed by the sixth segment, and a branch whose weakest segment
# is 0.08 nats a token below its neighbours' stops. With a vote stop, the next wave starts
# once the current one's leaves are more likely than not to leave the vote open: on 256
# validation questions 1.34x self-consistency's questions per second at 8 clients
# against 1.29x waiting until they could not settle it, with the same tokens and answers.
# At a few clients, placing a wave's leaves by the fourth segment with vote_stop_p 0.9 and
# next_wave_below 0.8 is faster (more rows busy: 1.53x self-consistency's questions per
# second against 1.37x at 8 clients, N = 16), but spends 5-10% more tokens a question,
# which is what counts once the engine's rows are full; so these stay the defaults.
SEGMENT: Final = 32
ALIGN: Final = 32
BRANCH: Final = 4
FORK_DEPTH: Final = 6
FORK_ABOVE: Final = 1.0
FORK_AT: Final = "node"
STOP_MARGIN: Final = 0.08
MAX_SEGMENTS: Final = 256
VOTE_STOP: Final = "never"
VOTE_STOP_P: Final = 0.95  # Adaptive-Consistency's threshold
NEXT_WAVE_BELOW: Final = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeOptions:
    """One request's tree."""

    segment: int  # tokens per segment (unit tokens), or one step's cap (unit steps)
    unit: Unit
    step_delimiter: str  # where a step ends (unit steps)
    # Branches drawn from the prompt, per wave with a vote stop (None: N // 2, at least 1;
    # with a vote stop, 3 / 8 of a wave's leaves, rounded up).
    roots: int | None
    branch: int  # most children one node forks into per segment
    # A node forks when its last segment's surprisal (mean -logprob of its sampled
    # tokens) is at least this times the mean of every segment so far in the tree.
    fork_above: float
    # "node": the unsure node's children continue after its segment (TreePO's fork);
    # "parent": the unsure segment itself is drawn again beside it (siblings);
    # "token": drawn again from its least likely sampled token on (the signal is that
    # token's surprisal), the tokens before it shared.
    fork_at: ForkAt
    # Every leaf is placed by this segment: from then on free leaves go to the live
    # nodes whatever their uncertainty (the fallback), most uncertain first.
    fork_depth: int
    # A live node stops when its weakest segment's mean logprob falls more than this many
    # nats per token below the live nodes' median weakest segment (0: never).
    stop_margin: float
    max_segments: int  # a leaf's thinking is at most this many segments
    # The engine's prefix-cache block (0: no alignment): segments end where the next
    # request's ids are one past a block boundary, so vLLM reads all of them but the last
    # from its cache instead of computing the unfilled block again every segment.
    align: int
    vote: Vote  # plain majority, or each leaf weighted by its confidence
    # Answer leaves as they finish and stop the tree once their vote is settled
    # (strategies.tree.vote); vote_stop_p: the "likely" rule's probability.
    vote_stop: VoteStop
    vote_stop_p: float
    # With a vote stop, the leaves the tree grows at a time (None: max(4, N // 2)); the
    # next wave, a tree of its own from the prompt, is drawn only when the vote of those
    # before it has not settled.
    wave: int | None
    # The next wave starts once the chance that this wave's leaves still to come settle
    # the vote (strategies.tree.vote.settle_chance) is below this; 0: only once they
    # cannot settle it whatever they answer.
    next_wave_below: float

    @property
    def reads_signal(self) -> bool:
        """Whether anything in the tree reads its tokens' logprobs: the forks' uncertainty,
        the early stop, the confidence vote, a fork at the least sure token. Without them
        the engine is not asked for logprobs, which cost about a tenth of its tokens a
        second (``thinkgate bench segment-cost``)."""
        return (
            self.fork_above > 0
            or self.stop_margin > 0
            or self.vote == "confidence"
            or self.fork_at == "token"
        )


def tree_options(request: StrategyRequest, *, default_delimiter: str) -> TreeOptions:
    """The request's options; 400 naming the field for a bad one."""
    opts = request.options
    unit = options.choice(opts, "segment_unit", "tokens", UNITS)
    roots = options.integer(opts, "roots", None, hi=4096)
    samples = request.budget.samples
    if roots is not None and samples is not None and roots > samples:
        raise InvalidRequest(
            f"roots ({roots}) must be at most the samples budget ({samples}): each root "
            "ends in one leaf at least",
            param="roots",
        )
    vote_stop = options.choice(opts, "vote_stop", VOTE_STOP, VOTE_STOPS)
    if vote_stop != "likely" and opts.get("vote_stop_p") is not None:
        raise InvalidRequest("vote_stop_p applies with vote_stop likely only", param="vote_stop_p")
    for field in ("wave", "next_wave_below"):
        if vote_stop == "never" and opts.get(field) is not None:
            raise InvalidRequest(f"{field} applies with a vote_stop only", param=field)
    return TreeOptions(
        segment=options.integer(opts, "segment", SEGMENT, hi=1 << 16),
        unit=unit,  # type: ignore[arg-type]  # checked against UNITS
        step_delimiter=options.text(opts, "step_delimiter", default_delimiter),
        roots=roots,
        branch=options.integer(opts, "branch", BRANCH, hi=64),
        fork_above=options.number(opts, "fork_above", FORK_ABOVE, lo=0.0, hi=100.0),
        fork_at=options.choice(opts, "fork_at", FORK_AT, FORK_ATS),  # type: ignore[arg-type]
        fork_depth=options.integer(opts, "fork_depth", FORK_DEPTH, hi=4096),
        stop_margin=options.number(opts, "stop_margin", STOP_MARGIN, lo=0.0, hi=100.0),
        max_segments=options.integer(opts, "max_segments", MAX_SEGMENTS, hi=1 << 16),
        align=options.integer(opts, "align", ALIGN, lo=0, hi=1 << 12),
        vote=options.choice(opts, "vote", "majority", VOTES),  # type: ignore[arg-type]
        vote_stop=vote_stop,  # type: ignore[arg-type]  # checked against VOTE_STOPS
        vote_stop_p=options.number(opts, "vote_stop_p", VOTE_STOP_P, lo=0.5, hi=1.0, lo_open=True),
        wave=options.integer(opts, "wave", None, hi=4096),
        next_wave_below=options.number(opts, "next_wave_below", NEXT_WAVE_BELOW, lo=0.0, hi=1.0),
    )


BODY_OPTIONS: Final = frozenset(
    {
        "segment",
        "segment_unit",
        "step_delimiter",
        "roots",
        "branch",
        "fork_above",
        "fork_at",
        "fork_depth",
        "stop_margin",
        "max_segments",
        "vote",
        "align",
        "vote_stop",
        "vote_stop_p",
        "wave",
        "next_wave_below",
    }
)
