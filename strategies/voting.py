"""How a pool of samples votes: plain majority, or weighted by trace confidence (DeepConf
offline). Body options of ``self-consistency``, ``best-of-majority``, ``pets`` and ``deepconf``:

* ``vote``: ``majority`` (default; one sample, one vote), ``confidence`` (each sample
  votes with its trace confidence: the lowest sliding-window mean of its token
  confidences), or ``confidence-top`` (only the ``vote_filter`` share of most confident
  samples vote, confidence-weighted);
* ``vote_filter``: the share kept by ``confidence-top`` (default 0.7, the paper's
  reported ``top70``);
* ``confidence_window`` (tokens per group, default 16) and ``confidence_top_k``
  (candidates per token confidence, default 5): chosen on the testbed's ~100-400-token
  traces as the pair whose lowest group confidence best tells right traces from wrong
  ones (AUROC 0.79 against 0.69 for the paper's whole-trace mean; the table is in
  ``benchmarks/results/confidence/confidence.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from core import options
from core.base import StrategyRequest
from core.engine import Sample
from core.errors import BackendError, InvalidRequest
from core.token_confidence import keep_top, lowest_group
from kernels.confidence.args import MAX_TOP_K, MAX_WINDOW
from strategies.selection import AnswerClass, build_classes

Vote = Literal["majority", "confidence", "confidence-top"]
VOTES: Final = ("majority", "confidence", "confidence-top")
DEFAULT_FILTER: Final = 0.7
DEFAULT_WINDOW: Final = 16
DEFAULT_TOP_K: Final = 5
OPTIONS: Final = ("vote", "vote_filter", "confidence_window", "confidence_top_k")


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteOptions:
    vote: Vote = "majority"
    share: float = DEFAULT_FILTER
    window: int = DEFAULT_WINDOW
    top_k: int = DEFAULT_TOP_K

    @property
    def needs_confidence(self) -> bool:
        return self.vote != "majority"


def share_option(request: StrategyRequest, name: str, default: float) -> float:
    """A share in (0, 1] from the body (``vote_filter``, ``consensus``)."""
    return options.number(request.options, name, default, lo=0.0, hi=1.0, lo_open=True)


def vote_options(request: StrategyRequest, *, default: Vote = "majority") -> VoteOptions:
    """The request's vote options; 400 naming the field for a bad one."""
    vote = options.choice(request.options, "vote", default, VOTES)
    if "vote_filter" in request.options and vote != "confidence-top":
        raise InvalidRequest("vote_filter applies to vote confidence-top only", param="vote_filter")
    return VoteOptions(
        vote=vote,  # type: ignore[arg-type]
        share=share_option(request, "vote_filter", DEFAULT_FILTER),
        window=options.integer(request.options, "confidence_window", DEFAULT_WINDOW, hi=MAX_WINDOW),
        top_k=options.integer(request.options, "confidence_top_k", DEFAULT_TOP_K, hi=MAX_TOP_K),
    )


def trace_confidences(samples: Sequence[Sample], window: int) -> list[float]:
    """Each sample's lowest group confidence (the engine must have reported per-token
    confidences: ``SamplingConfig.top_logprobs``)."""
    out: list[float] = []
    for s in samples:
        if s.confidences is None:
            raise BackendError("the engine returned no token confidences (top_logprobs)")
        # An empty trace (-inf) weighs nothing rather than poisoning the sums.
        out.append(max(lowest_group(s.confidences, window), 0.0))
    return out


def voting_classes(
    answers: Sequence[str | None],
    confidences: Sequence[float] | None,
    options: VoteOptions,
    voters: Sequence[bool] | None = None,
    rewards: Sequence[float] | None = None,
    *,
    exact: bool = False,
) -> tuple[AnswerClass, ...]:
    """Answer classes whose members are the samples that vote, weighted by confidence
    (``rewards``) unless the vote is plain majority. ``voters`` leaves samples out
    beforehand (DeepConf's stopped traces); ``rewards`` replaces the weights the classes
    carry (Best-of-Majority keeps its scorer's rewards and reads the confidence shares
    with :func:`confidence_shares`)."""
    allowed = list(voters) if voters is not None else [True] * len(answers)
    if options.vote == "confidence-top":
        assert confidences is not None
        idx = [i for i in range(len(answers)) if allowed[i]]
        kept = (
            {idx[j] for j in keep_top([confidences[i] for i in idx], options.share)}
            if idx
            else set()
        )
        allowed = [i in kept for i in range(len(answers))]
    masked = [a if ok else None for a, ok in zip(answers, allowed, strict=True)]
    weights = None if options.vote == "majority" else confidences
    return build_classes(masked, rewards if rewards is not None else weights, exact=exact)


def confidence_shares(
    classes: Sequence[AnswerClass], confidences: Sequence[float]
) -> dict[int, float]:
    """Each class's share of the voting confidence (by ``first_seen``): what replaces the
    count share in Best-of-Majority's frequency filter under a confidence vote."""
    weight = {c.first_seen: sum(confidences[m] for m in c.members) for c in classes}
    total = sum(weight.values())
    return {key: (w / total if total > 0 else 0.0) for key, w in weight.items()}
