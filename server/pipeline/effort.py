"""Reasoning effort as a real thinking budget, and a thinking budget fitted under the
request's output limit. Pure code, used by every generation route.

The effort table (``reasoning_effort`` on chat and completions, ``reasoning.effort`` on
``/v1/responses``) is a server setting: each effort thinks for a share of the model's
context (``--effort-none`` ... ``--effort-max``), so one table serves a 512-token
testbed and a 128K-token model alike. (A model served past what it was trained on, as
the testbed is at 65,536, has its efforts sized by the trained length its default-model
provider gives: ``effort_context``, see :func:`effort_context`.) With the defaults:

    effort    share    512-token context    32K context
    none      0        0                    0
    minimal   1/32     16                   1,024
    low       3/32     48                   3,072
    medium    1/4      128                  8,192
    high      5/8      320                  20,480
    xhigh     3/4      384                  24,576
    max       7/8      448                  28,672

An effort is a whole plan, not only a thinking budget: a request that names no strategy
and sets nothing but an effort runs ``auto`` under a total-token ceiling of
``samples x (thinking + answer_reserve + 2)``, with the effort's samples

    effort    none  minimal  low  medium  high  xhigh  max
    samples   1     1        2    4       8     12     16

so ``auto`` may spend more effort as more samples as well as longer thinking, and the
thinking budget caps each sample. With a strategy named, an effort stays that
strategy's thinking budget.

An explicit thinking budget (``X-Budget-Thinking``, body ``budget.thinking``, Anthropic's
``thinking.budget_tokens``) always wins over an effort. Whatever its source, a thinking
budget is then lowered so that the answer still fits the request's output limit: it
leaves ``--answer-reserve`` tokens (or the solution budget, when one is set) and the
closing think delimiter. ``X-Budget-Applied`` reports the budget after both steps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from core import defaults
from core.budget import Budget
from server.settings import EFFORTS, Effort, Settings


def effort_context(settings: Settings, served: int) -> int:
    """The length efforts are shares of: the default model's ``effort_context`` when it is
    the model served (never past ``served``), else the served context."""
    try:
        offered = defaults.installed()
    except defaults.NoDefaultModel:
        return served
    if offered.effort_context is None or not offered.is_default_model(settings.model_path):
        return served
    return min(served, offered.effort_context)


def thinking_tokens(settings: Settings, effort: Effort, context: int) -> int:
    """The thinking budget of ``effort`` on a model with ``context`` tokens (never over
    the server's ``max_budget_tokens``)."""
    return min(int(settings.effort_share(effort) * context), settings.max_budget_tokens)


EFFORT_SAMPLES: Final[dict[Effort, int]] = {
    "none": 1,
    "minimal": 1,
    "low": 2,
    "medium": 4,
    "high": 8,
    "xhigh": 12,
    "max": 16,
}


def ceiling(settings: Settings, effort: Effort, thinking: int) -> int:
    """The total-token ceiling of ``effort``'s plan: its samples, each thinking at most
    ``thinking`` and answering in the server's answer reserve (and the delimiters)."""
    return EFFORT_SAMPLES[effort] * (thinking + settings.answer_reserve + 2)


def table(settings: Settings, context: int) -> dict[Effort, int]:
    """Every effort's thinking budget on this context, in order."""
    return {e: thinking_tokens(settings, e, context) for e in EFFORTS}


def fit_output(budget: Budget, limit: int | None, *, end_tokens: int, reserve: int) -> Budget:
    """``budget`` with its thinking lowered so that ``end_tokens`` (the closing delimiter)
    and the answer (the solution budget if set, else ``reserve`` tokens, at most half the
    limit) still fit in ``limit`` output tokens; unchanged without a limit or a thinking
    budget."""
    if limit is None or budget.thinking is None:
        return budget
    answer = budget.solution if budget.solution is not None else min(reserve, limit // 2)
    room = max(0, limit - end_tokens - answer)
    if budget.thinking <= room:
        return budget
    return replace(budget, thinking=room)
