"""``pets``: online PETS, budget-aware self-consistency for one question at a time.

With an allocation table (``Resources`` item ``"pets_table"``, a ``PetsTable``):

1. draw ``K0 = 4`` warm-up samples (one engine request, ``n = 4``);
2. their answer pattern (``"4"``, ``"3+1"``, ``"2+2"``, ``"2+1+1"``, ``"1+1+1+1"``)
   picks the bucket, whose calibrated budget ``B_t`` includes the warm-up;
3. draw ``B_t - 4`` more (one engine request), and return the majority answer.

With a table, ``X-Budget-Samples`` (budget field ``samples``) is the **average** number
of samples per question the request is planned for: the bucket plan is solved again for
that average from the table's fit (``PetsTable.replanned``; the table's own average when
absent), and ``thinkgate.planned_average`` reports what the plan spends on average over
the calibration questions. The body field ``cap`` bounds one question's samples (default
the table's ``b_max``); a cap below ``K0`` shrinks the warm-up to the cap. Without a
table the strategy falls back to the adaptive rule of :mod:`strategies.pets.adaptive`
(rounds of 4 until the posterior says the majority is settled, or the cap), where there
is no average to plan and ``samples`` (else ``cap``, else ``ADAPTIVE_CAP``) is the cap.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from typing import ClassVar, Final

import numpy as np

from core import options
from core.base import (
    JSON,
    Choice,
    Progress,
    ResourceKey,
    Result,
    StrategyContext,
    StrategyRequest,
    Usage,
)
from core.engine import Engine, GenerateRequest, Sample
from core.errors import BackendError, InvalidBudget, InvalidRequest
from strategies.logprobs import Texts
from strategies.pets.adaptive import DEFAULT_RULE, AdaptiveRule, next_round
from strategies.pets.labels import K0, Label, label_answers, pattern
from strategies.pets.table import PetsTable
from strategies.pool import Analysed, analyse, class_info, usage_of
from strategies.selection import build_classes, select_majority, select_weighted
from strategies.voting import OPTIONS as VOTE_OPTIONS
from strategies.voting import trace_confidences, vote_options, voting_classes

TABLE_KEY: Final = ResourceKey("pets_table", PetsTable)
RULE_KEY: Final = ResourceKey("pets_adaptive", AdaptiveRule)  # optional
ADAPTIVE_CAP: Final = 16  # samples cap of the fallback when the request sets none


def table_of(ctx: StrategyContext) -> PetsTable | None:
    return ctx.resources.get(TABLE_KEY)


class Pets:
    name: ClassVar[str] = "pets"
    budget_fields: ClassVar[frozenset[str]] = frozenset({"samples"})
    body_options: ClassVar[frozenset[str]] = frozenset({"cap", *VOTE_OPTIONS})
    streams_live: ClassVar[bool] = False
    # Its samples are plain draws of the request: the answer's grammar and the tools
    # apply as in self-consistency, and the buckets count votes as it does.
    honours_response_format: ClassVar[bool] = True
    honours_tools: ClassVar[bool] = True
    returns_logprobs: ClassVar[bool] = True  # the chosen sample's, as self-consistency

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        samples = request.budget.samples
        if samples is not None and samples < 1:
            raise InvalidBudget("samples must be >= 1", param="samples")
        if request.n != 1:
            raise InvalidRequest("pets returns one answer; n must be 1", param="n")
        option_cap(request)
        vote_options(request)

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[Progress | Result, None]:
        table = table_of(ctx)
        request = ctx.request
        cap_option = option_cap(request)
        if table is not None:
            cap = cap_option or table.b_max
            average = request.budget.samples or table.average_budget
            # The plan needs k0 <= cap; a smaller cap only shrinks the warm-up below.
            table = table.replanned(average, max(cap, table.k0))
        else:
            cap = request.budget.samples or cap_option or ADAPTIVE_CAP
        samples: list[Sample] = []
        warm = await _generate(ctx, min(K0, cap), round_no=0)
        samples.extend(warm)
        labels = list(_labels(analyse(ctx, samples)))
        warm_pattern = pattern(labels) if len(labels) == K0 else None
        info: dict[str, JSON] = {"strategy": self.name, "cap": cap}
        yield Progress(data={"phase": "warmup", "samples": len(samples), "pattern": warm_pattern})
        if table is not None:
            allocated = table.budget(warm_pattern) if warm_pattern is not None else len(samples)
            target = min(allocated, cap)
            info.update(
                mode="table",
                bucket=warm_pattern,
                allocated=allocated,
                table={"average_budget": table.average_budget, "b_max": table.b_max},
                average_budget=table.average_budget,
                planned_average=round(table.expected_budget, 4),
            )
            rounds = 1
            if target > len(samples) and ctx.allowance.affords(target - len(samples)):
                samples.extend(await _generate(ctx, target - len(samples), round_no=1))
                rounds = 2
                yield Progress(data={"phase": "extra", "samples": len(samples)})
        else:
            rule = ctx.resources.get(RULE_KEY) or DEFAULT_RULE
            seed = ctx.request.sampling.seed
            rng = np.random.default_rng(seed if seed is not None else 0)
            rounds = 1
            while True:
                more, confidence = next_round(labels, cap=cap, rule=rule, rng=rng)
                if more == 0:
                    break
                if (why := ctx.allowance.short(more)) is not None:
                    ctx.allowance.stop(why)  # the request's ceiling or deadline
                    break
                samples.extend(await _generate(ctx, more, round_no=rounds))
                rounds += 1
                labels = list(_labels(analyse(ctx, samples)))
                yield Progress(
                    data={"phase": "adaptive", "samples": len(samples), "confidence": confidence}
                )
            info.update(
                mode="adaptive",
                bucket=warm_pattern,
                threshold=rule.threshold,
                confidence=round(confidence, 6),
            )
        info["engine_requests"] = rounds
        yield _final(ctx, analyse(ctx, samples), info)


async def _generate(ctx: StrategyContext, n: int, *, round_no: int) -> list[Sample]:
    """``n`` samples of the request's prompt as ONE engine request (shared prefix)."""
    sampling = ctx.request.sampling
    votes = vote_options(ctx.request)
    if votes.needs_confidence:  # per-token confidences for the final vote
        sampling = replace(sampling, top_logprobs=votes.top_k)
    if sampling.seed is not None:
        # Children j of a request get seed + j: keep rounds on disjoint streams.
        sampling = replace(sampling, seed=sampling.seed + 1000 * round_no)
    n = ctx.allowance.samples(n)  # the request's ceiling: each sample keeps an answer's room
    request = GenerateRequest(
        request_id=f"{ctx.request.request_id}-pets{round_no}",
        prompt_token_ids=ctx.request.prompt_token_ids,
        sampling=replace(sampling, n=n),
    )
    got = await ctx.engine.generate(request)
    if len(got) != n:
        raise BackendError(f"engine returned {len(got)} of {n} samples")
    return got


def option_cap(request: StrategyRequest) -> int | None:
    """The body field ``cap``: the most samples one question may get (None: absent)."""
    return options.integer(request.options, "cap", None)


def _labels(pool: Analysed) -> Sequence[Label]:
    return label_answers(pool.answers, exact=pool.exact)[0]


def _final(ctx: StrategyContext, pool: Analysed, info: dict[str, JSON]) -> Result:
    total = len(pool.samples)
    votes = vote_options(ctx.request)
    if votes.needs_confidence:
        # The buckets read warm-up counts; only the final answer is confidence-weighted.
        confidences = trace_confidences(pool.samples, votes.window)
        classes = voting_classes(pool.answers, confidences, votes, exact=pool.exact)
        chosen = select_weighted(classes, 1).chosen if classes else ()
        info.update(vote=votes.vote, sample_confidences=[round(c, 6) for c in confidences])
    else:
        classes = build_classes(pool.answers, exact=pool.exact)
        chosen = select_majority(classes, 1).chosen if classes else ()
    pick = chosen[0].representative if chosen else 0
    split, sample = pool.splits[pick], pool.samples[pick]
    tokens = ctx.engine.tokens
    answer = chosen[0].answer if chosen else None
    choice_info: dict[str, JSON] = {"sample_index": pick, "answer": answer}
    if chosen:
        choice_info.update(class_info(chosen[0], total))
    choice = Choice(
        index=0,
        reasoning=tokens.decode(split.reasoning_ids),
        content=tokens.decode(split.content_ids),
        finish_reason=sample.finish_reason,
        info=choice_info,
        logprobs=None if sample.logprobs is None else Texts(tokens).entries(sample.logprobs),
    )
    info.update(
        samples=total,
        answer=answer,
        rule=("weighted-majority" if votes.needs_confidence else "majority")
        if chosen
        else "no-answer",
        unanswered=sum(1 for a in pool.answers if a is None),
        votes=[class_info(c, total) for c in classes],
    )
    return Result(choices=(choice,), usage=_usage(ctx, pool, info), samples=total, info=info)


def _usage(ctx: StrategyContext, pool: Analysed, info: dict[str, JSON]) -> Usage:
    usage = usage_of(ctx, pool)
    # usage_of counts the prompt once (one request); each round sends it again.
    rounds = info.get("engine_requests")
    extra = len(ctx.request.prompt_token_ids) * ((rounds if isinstance(rounds, int) else 1) - 1)
    return replace(usage, prompt_tokens=usage.prompt_tokens + extra)
