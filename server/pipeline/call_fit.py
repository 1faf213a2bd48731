"""One engine call fitted to what its request has left (``core.allowance``): pure code.

Tokens: the call may generate ``n x max_tokens`` at most, so ``max_tokens`` is lowered to
``left // n`` when that is less (``left // rows`` over the rows of the calls submitted
with it, so one call of a batch cannot take what its siblings need). A call that draws
thinking only keeps one answer's room back per row (each row may need its answer later:
two-pass's answers, a search's paths). A call that answers after thinking has closed
gets only the answer's room when the ceiling binds, not all that is left (its siblings,
answering other rows, come next). A call whose prompt leaves thinking open and that
answers itself must still have room for its answer: its thinking budget (the elastic
processor's, added when the engine has that processor and the call carried none) leaves
the solution budget, or the server's ``answer_reserve``, and the closing delimiter.

Time: a call is cut at the deadline (a thinking-only call earlier, by the answer's time
at the measured decode speed); inside the engine thinking ends at the deadline less the
answer's time (``thinkgate_think_deadline``, a wall-clock instant).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.allowance import Allowance, BudgetSpent
from core.engine import ExtraArg, GenerateRequest, ModelTokens
from kernels.elastic import args as elastic_args
from strategies.reasoning import thinking_open_after


@dataclass(frozen=True, slots=True, kw_only=True)
class Fitted:
    """A call as it is sent: its request, the tokens it reserved, the instant (on the
    allowance's clock) at which the gateway ends it, and whether anything was lowered."""

    request: GenerateRequest
    reserved: int
    cut_at: float | None
    clamped: bool


def fit_call(
    request: GenerateRequest,
    allowance: Allowance,
    *,
    tokens: ModelTokens,
    max_model_len: int,
    processors: frozenset[str],
    answer_reserve: int,
    rows: int | None = None,
) -> Fitted:
    """``request`` under ``allowance``; raises ``BudgetSpent`` when it does not fit.
    ``rows``: the rows of this call and of the calls sent with it not yet fitted (default:
    this call's ``n``)."""
    s = request.sampling
    n = max(1, s.n)
    room = max(0, max_model_len - len(request.prompt_token_ids))
    cap = room if s.max_tokens is None else min(s.max_tokens, room)
    thinking_open = thinking_open_after(request.prompt_token_ids, tokens)
    answers = not request.thinking_only
    answer = allowance.limits.answer
    per = cap
    left = allowance.left()
    if left is not None:
        usable = left - (0 if answers else answer * n)
        per = min(cap, max(0, usable) // max(n, rows or n))
        if answers and not thinking_open and per < cap:
            per = min(per, answer)  # the answer's room: the next rows need theirs
        need = min(answer, cap) if answers else 1
        if per < max(1, need):
            raise BudgetSpent(
                "tokens",
                f"{left} tokens are left of {allowance.limits.tokens}; a call of {n} needs "
                f"{n * max(1, need)}",
            )
    cut_at: float | None = None
    think_until: float | None = None
    remaining = allowance.time_left()
    if remaining is not None:
        answer_s = allowance.answer_seconds()
        window = remaining if answers else remaining - answer_s
        if window <= 0:
            raise BudgetSpent("deadline", "no time is left for this call and an answer")
        cut_at = allowance.clock() + window
        wall = allowance.limits.wall_deadline
        if answers and thinking_open and wall is not None:
            think_until = wall - allowance.limits.margin_s - answer_s
    clamped = per < cap
    extra = dict(s.extra_args)
    if answers and thinking_open and elastic_args.PROCESSOR_NAME in processors:
        if clamped or think_until is not None or elastic_args.THINKING_BUDGET in extra:
            clamped = _fit_thinking(extra, per, tokens, answer_reserve) or clamped
        if think_until is not None and elastic_args.THINKING_BUDGET in extra:
            extra[elastic_args.THINK_DEADLINE] = round(think_until, 3)
    sampling = replace(s, max_tokens=per if left is not None else s.max_tokens, extra_args=extra)
    return Fitted(
        request=replace(request, sampling=sampling),
        reserved=n * per if left is not None else 0,
        cut_at=cut_at,
        clamped=clamped,
    )


def _fit_thinking(
    extra: dict[str, ExtraArg], per: int, tokens: ModelTokens, answer_reserve: int
) -> bool:
    """Make the elastic arguments in ``extra`` leave the answer room within ``per``
    tokens (adding them when the call had none); True when a budget was lowered."""
    end = tokens.think_end_ids
    if not end or not tokens.eos_token_ids:
        return False
    solution = extra.get(elastic_args.SOLUTION_BUDGET)
    answer = solution if isinstance(solution, int) else answer_reserve
    answer = min(answer, max(0, per - len(end)))
    room = max(0, per - len(end) - answer)
    if elastic_args.THINKING_BUDGET not in extra:
        extra[elastic_args.THINKING_BUDGET] = room
        if len(end) == 1:
            extra[elastic_args.THINK_END_ID] = end[0]
        else:
            extra[elastic_args.THINK_END_IDS] = ",".join(map(str, end))
        extra[elastic_args.EOS_ID] = tokens.eos_token_ids[0]
        extra[elastic_args.THINKING_OPEN] = 1
        return False
    lowered = False
    thinking = extra[elastic_args.THINKING_BUDGET]
    if isinstance(thinking, int) and thinking > room:
        extra[elastic_args.THINKING_BUDGET] = thinking = room
        lowered = True
    if isinstance(solution, int) and solution > answer:
        extra[elastic_args.SOLUTION_BUDGET] = answer
        lowered = True
    minimum = extra.get(elastic_args.THINKING_MIN)
    if isinstance(minimum, int) and isinstance(thinking, int) and minimum > thinking:
        extra[elastic_args.THINKING_MIN] = thinking
    return lowered
