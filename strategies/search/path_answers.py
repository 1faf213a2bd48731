"""How a finished path of a step search (or a tree's leaf) is answered: the answer call
after its thinking, under the solution budget and the request's grammar, and the
response's choice from the answered path."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from core.base import Choice, StrategyContext, budget_cuts
from core.engine import GenerateRequest, Sample
from core.errors import BackendError
from strategies.pool import answer_keys
from strategies.search.paths import Ledger, Path, room_after, sampling_of, split_of


@dataclass(frozen=True, slots=True, kw_only=True)
class Answered:
    """A finished path with its answer: ``ids`` = path + (forced ``</think>``) + answer."""

    path: Path
    ids: tuple[int, ...]
    answer_ids: tuple[int, ...]
    finish: Literal["stop", "length", "abort"]
    solution_cut: bool


async def answer(
    ctx: StrategyContext,
    paths: Sequence[Path],
    ledger: Ledger,
    drawn: Sequence[tuple[int, ...]] | None = None,
) -> list[Answered]:
    """The answer of each path (closed or forced ones are continued after ``</think>``
    under the solution budget; ended ones have what they wrote). Distinct paths are one
    engine request each, all at once. ``drawn``: per path, the answer's tokens a call
    that ran on past the end of thinking already wrote (cut by its ``max_tokens``): the
    answer continues after them, under what is left of the solution budget."""
    solution = ctx.request.budget.solution
    drawn = list(drawn) if drawn is not None else [()] * len(paths)
    heads: list[tuple[int, ...]] = []
    before: dict[tuple[int, ...], tuple[int, ...]] = {}  # head -> its answer's drawn tokens
    for p, d in zip(paths, drawn, strict=True):
        head = _answer_head(ctx, p) + d
        heads.append(head)
        before[head] = d

    def space(head: tuple[int, ...]) -> int:
        left = room_after(ctx, head)
        return left if solution is None else min(left, solution - len(before[head]))

    todo = sorted(
        {h for h, p in zip(heads, paths, strict=True) if p.state != "ended" and space(h) > 0}
    )
    requests = []
    for g, head in enumerate(todo):
        requests.append(
            GenerateRequest(
                request_id=f"{ctx.request.request_id}-answer-{g}",
                prompt_token_ids=ctx.request.prompt_token_ids + head,
                sampling=sampling_of(ctx, ledger, n=1, max_tokens=space(head), extra_args={}),
            )
        )
        ledger.seed_offset += 1
    t0 = time.perf_counter()
    results = await ctx.engine.generate_batch(requests)
    ledger.engine_s += time.perf_counter() - t0
    got: dict[tuple[int, ...], Sample] = {}
    for head, req, samples in zip(todo, requests, results, strict=True):
        if len(samples) != 1:
            raise BackendError(f"engine returned {len(samples)} answers for one request")
        ledger.engine_requests += 1
        ledger.engine_prompt_tokens += len(req.prompt_token_ids)
        ledger.completion_tokens += len(samples[0].token_ids)
        ledger.answer_tokens += len(samples[0].token_ids)
        got[head] = samples[0]
    out: list[Answered] = []
    for head, p in zip(heads, paths, strict=True):
        d = before[head]
        sample = got.get(head)
        if sample is None and d:
            out.append(drawn_answer(ctx, p, d, "length"))  # cut, and no room after it
        elif sample is None:
            out.append(
                Answered(path=p, ids=p.ids, answer_ids=(), finish=p.finish, solution_cut=False)
            )
        else:
            out.append(drawn_answer(ctx, p, d + tuple(sample.token_ids), sample.finish_reason))
    return out


def _answer_head(ctx: StrategyContext, path: Path) -> tuple[int, ...]:
    """What an answer follows: the path, and ``</think>`` after a forced one."""
    end = ctx.engine.tokens.think_end_ids
    return path.ids + end if path.state == "forced" and end else path.ids


def drawn_answer(
    ctx: StrategyContext,
    path: Path,
    answer_ids: tuple[int, ...],
    finish: Literal["stop", "length", "abort"],
) -> Answered:
    """A closed or forced ``path`` answered by ``answer_ids`` (after its forced
    ``</think>``), which ended with ``finish``."""
    solution = ctx.request.budget.solution
    content = tuple(t for t in answer_ids if t not in ctx.engine.tokens.eos_token_ids)
    cut = solution is not None and finish == "length" and len(content) >= solution
    ids = _answer_head(ctx, path) + answer_ids
    return Answered(path=path, ids=ids, answer_ids=answer_ids, finish=finish, solution_cut=cut)


def answer_choice(ctx: StrategyContext, answered: Answered) -> Choice:
    """The response's choice from an answered path: reasoning, content, the budget cuts."""
    tokens = ctx.engine.tokens
    split = split_of(ctx, answered.ids)
    budget = ctx.request.budget
    cuts = None
    if budget.thinking is not None or budget.solution is not None:
        thinking_cut = (
            budget.thinking is not None
            and answered.path.state == "forced"
            and split.reasoning_tokens >= budget.thinking
        )
        cuts = budget_cuts(thinking=thinking_cut, solution=answered.solution_cut)
    content = tokens.decode(split.content_ids)
    return Choice(
        index=0,
        reasoning=tokens.decode(split.reasoning_ids),
        content=content,
        finish_reason="length" if answered.solution_cut else answered.finish,
        info={
            "answer": answer_keys(ctx.request, [content])[0][0],
            "path_state": answered.path.state,
            "steps": len(answered.path.steps),
        },
        budget_cut=cuts,
    )
