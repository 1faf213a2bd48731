"""``auto``: the request's budget (a total-token ceiling, a deadline) turned into a plan,
a strategy with its samples and per-sample budgets, then that plan run.

With a calibrated table for the served model (``AutoTable``, built offline on calibration
questions by ``thinkgate calibrate auto``) the plan is the row with the highest expected
accuracy that fits the request: its calibrated mean usage, with a 20% margin, within the
ceiling; under a deadline, among the rows measured *with* a deadline (each plan run on the
calibration questions with ``deadline_ms`` set, at 1 and at 8 concurrent requests), those
of the largest calibrated deadline the request's time covers, at the calibrated crowd
nearest to the requests now in flight. A plan measured under its deadline already counts
what the deadline cuts (a vote over the samples that finished, thinking ended early), so
it is not asked to finish in time on its own. A deadline shorter than every calibrated
one (or whose calibrated plans all pass the ceiling) falls back to the rows measured
without one, whose 90th-percentile seconds, scaled by the engine's load, must fit; when
none does, to the rows of the tightest calibrated deadline. Without a table, the
documented rule of :func:`rule_plan`.
Either way the ceiling and the deadline are then held by the request's allowance
(``core.allowance``) like any strategy's, so a plan that was optimistic still ends in time
and within its tokens.

The ``thinkgate`` object says what was chosen and why (``auto``: the plan, its source,
the budget and load it was chosen for, its expected accuracy where a table gave one).
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, Final

from core.allowance import Allowance
from core.base import (
    JSON,
    ChoiceDelta,
    ResourceKey,
    Result,
    Strategy,
    StrategyContext,
    StrategyEvent,
    StrategyRequest,
)
from core.budget import Budget
from core.engine import Engine, EngineLoad
from core.errors import BackendUnavailable, InvalidRequest
from core.registry import REGISTRY_KEY
from strategies.vote_stop import CONFIDENCE as STOP_CONFIDENCE
from strategies.vote_stop import FLAG as STOP_FLAG

MAX_SAMPLES: Final = 16  # the rule's largest vote (more rarely pays on a deadline)
USAGE_MARGIN: Final = 1.2  # a table plan fits a ceiling when its mean usage x this does
MIN_VOTE: Final = 3  # fewer samples than this do not make a vote worth its tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRow:
    """One calibrated plan: what it runs and what it achieved on calibration questions."""

    strategy: str  # a registered strategy that needs only the engine
    samples: int
    thinking: int | None  # None: not capped (the deadline and the context bound it)
    accuracy: float
    tokens: float  # mean completion tokens per question
    seconds: float  # 90th percentile of the wall time per question
    # Measured with this deadline (None: without one, alone on the server) ...
    deadline_s: float | None = None
    # ... at this many requests in flight at once.
    clients: int = 1
    # Calibration questions behind this row (0: the table's ``questions``); rows measured
    # again on more questions say so.
    questions: int = 0
    # The 95% interval of ``accuracy`` over those questions (Wilson), where measured.
    low: float | None = None
    high: float | None = None

    def label(self) -> str:
        """The row as ``thinkgate.auto`` names it."""
        where = "" if self.deadline_s is None else f" @{self.deadline_s:g}s x{self.clients}"
        t = "" if self.thinking is None else f" t={self.thinking}"
        return f"{self.strategy}@{self.samples}{t}{where}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AutoTable:
    """The calibrated plans of one model (JSON, ``thinkgate calibrate auto``)."""

    model: str
    rows: tuple[PlanRow, ...]
    questions: int = 0
    profile: str | None = None  # the profile it belongs to (``strategies.profile``)
    # The staged votes' stop confidence the profile's fit chose (None: the rule's default).
    stop_confidence: float | None = None

    @classmethod
    def load(cls, path: Path, profile: str | None = None) -> AutoTable:
        data = json.loads(path.read_text())
        rows = tuple(PlanRow(**r) for r in data["rows"])
        stop = data.get("stop_confidence")
        return cls(
            model=data["model"],
            rows=rows,
            questions=int(data.get("questions", 0)),
            profile=profile,
            stop_confidence=None if stop is None else float(stop),
        )

    def as_json(self) -> dict[str, JSON]:
        return {
            "model": self.model,
            "questions": self.questions,
            **({} if self.stop_confidence is None else {"stop_confidence": self.stop_confidence}),
            "rows": [
                {
                    "strategy": r.strategy,
                    "samples": r.samples,
                    "thinking": r.thinking,
                    "accuracy": r.accuracy,
                    "tokens": r.tokens,
                    "seconds": r.seconds,
                    **({} if r.deadline_s is None else {"deadline_s": r.deadline_s}),
                    **({} if r.clients == 1 else {"clients": r.clients}),
                    **({} if r.questions == 0 else {"questions": r.questions}),
                    **({} if r.low is None else {"low": r.low, "high": r.high}),
                }
                for r in self.rows
            ],
        }


TABLE_KEY: Final = ResourceKey("auto_table", AutoTable)


@dataclass(frozen=True, slots=True)
class Crowd:
    """How many requests this gateway serves now (the server's admission counts them)."""

    in_flight: Callable[[], int]


CROWD_KEY: Final = ResourceKey("crowd", Crowd)
DEFAULT_TABLE: Final = Path(__file__).resolve().parent / "auto_tables" / "testbed-base.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What ``auto`` runs, and why."""

    strategy: str
    samples: int
    thinking: int | None
    source: str  # "table" or "rule"
    expected_accuracy: float | None = None
    reason: str = ""
    row: str | None = None  # the table row chosen (``PlanRow.label``)
    profile: str | None = None  # the profile whose table it is

    def info(self) -> dict[str, JSON]:
        where: dict[str, JSON] = {}
        if self.row is not None:
            where["row"] = self.row
        if self.profile is not None:
            where["profile"] = self.profile
        return {
            **where,
            "strategy": self.strategy,
            "samples": self.samples,
            "thinking": self.thinking,
            "source": self.source,
            "expected_accuracy": self.expected_accuracy,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Means:
    """What the plan is chosen for: the request's budget and the server's state now."""

    tokens: int | None  # the ceiling
    seconds: float | None  # time left for engine work (None: no deadline)
    seconds_per_token: float  # measured decode speed per row
    answer: int  # tokens one answer needs
    room: int  # context left after the prompt
    free_rows: int  # engine rows a new draw gets at once
    load: float  # busy share of the engine's rows (0..1+)
    thinking_cap: int | None = None  # the request's own thinking budget (an effort's)
    deadline: float | None = None  # seconds until the request's deadline (queueing spent)
    crowd: int = 1  # requests in flight on this gateway, this one included


def rule_plan(m: Means) -> Plan:
    """The plan without a table: the longest thinking each sample can afford, and as
    many samples as both limits allow.

    * per sample, at most ``room`` tokens, and with a deadline ``seconds / seconds_per_token``
      (samples decode side by side, so time bounds each sample's length, not their sum);
    * samples: the ceiling over a sample of ``min(length, 4 x answer + answer)`` tokens
      (a short but real thought), at most the engine's free rows under a deadline, at
      most :data:`MAX_SAMPLES`;
    * fewer than :data:`MIN_VOTE` samples: one ``elastic`` sample with all of it;
      otherwise ``self-consistency`` with the ceiling spread evenly.
    """
    length = m.room
    if m.seconds is not None:
        length = min(length, int(m.seconds / max(m.seconds_per_token, 1e-6)))
    length = max(length, m.answer)
    thought = max(1, min(length - m.answer, 4 * m.answer))
    by_tokens = MAX_SAMPLES if m.tokens is None else m.tokens // (thought + m.answer)
    rows = m.free_rows if m.seconds is not None else MAX_SAMPLES
    n = max(1, min(MAX_SAMPLES, by_tokens, max(1, rows)))
    if n < MIN_VOTE:
        total = length if m.tokens is None else min(length, m.tokens)
        return Plan(
            strategy="elastic",
            samples=1,
            thinking=_capped(max(0, total - m.answer), m),
            source="rule",
            reason=f"room for {n} sample(s) of a short thought: one sample thinks longer",
        )
    per = length if m.tokens is None else min(length, m.tokens // n)
    return Plan(
        strategy="self-consistency",
        samples=n,
        thinking=_capped(max(0, per - m.answer), m),
        source="rule",
        reason=f"{n} samples fit the budget with a thought each",
    )


def _capped(thinking: int, m: Means) -> int:
    return thinking if m.thinking_cap is None else min(thinking, m.thinking_cap)


def table_plan(table: AutoTable, m: Means) -> Plan | None:
    """The table's most accurate row that fits (None: none does)."""
    measured = _deadline_rows(table, m)
    best = _best(r for r in measured if _fits(r, m))
    reason = (
        f"the most accurate plan calibrated with a {measured[0].deadline_s:g} s deadline "
        f"at {measured[0].clients} request(s) in flight"
        if measured
        else ""
    )
    if best is None:  # no deadline, none calibrated for it, or none of those fits
        slowdown = 1.0 + max(0.0, m.load)  # a busy engine shares its batch: rows run slower
        best = _best(
            r
            for r in table.rows
            if r.deadline_s is None
            and _fits(r, m)
            and not (
                m.seconds is not None
                and (r.seconds * slowdown > m.seconds or r.samples > max(1, m.free_rows))
            )
        )
        reason = "the most accurate calibrated plan that fits"
    if best is None and m.deadline is not None:
        # Shorter than every calibrated deadline (a request that lost time in the queue
        # included), and no plan finishes in it uncut: the plans measured under the
        # tightest deadline, which were cut the way this one will be. The rule would
        # spread the little time over many samples, none of which reaches an answer.
        tightest = _deadline_rows(table, m, tightest=True)
        best = _best(r for r in tightest if _fits(r, m))
        if tightest:
            reason = (
                f"shorter than every calibrated deadline: the most accurate plan at the "
                f"tightest, {tightest[0].deadline_s:g} s, at {tightest[0].clients} "
                "request(s) in flight"
            )
    if best is None:
        return None
    return Plan(
        strategy=best.strategy,
        samples=best.samples,
        thinking=best.thinking,
        source="table",
        expected_accuracy=best.accuracy,
        reason=reason,
        row=best.label(),
        profile=table.profile,
    )


DEADLINE_SLACK: Final = 1.05  # a request that lost a few ms in the queue keeps its bucket


def _deadline_rows(table: AutoTable, m: Means, *, tightest: bool = False) -> list[PlanRow]:
    """The rows measured at the largest calibrated deadline the request's time covers, at
    the calibrated crowd nearest (by ratio) to the requests in flight; [] without a
    deadline or when the request's is shorter than every calibrated one (``tightest``:
    then the rows of the shortest calibrated deadline)."""
    if m.deadline is None:
        return []
    rows = [r for r in table.rows if r.deadline_s is not None]
    if not rows:
        return []
    crowds = sorted({r.clients for r in rows})
    crowd = min(crowds, key=lambda c: (abs(math.log(c / max(1, m.crowd))), -c))
    covered = [
        r
        for r in rows
        if r.clients == crowd and (r.deadline_s or 0.0) <= m.deadline * DEADLINE_SLACK
    ]
    if covered:
        bucket = max(r.deadline_s or 0.0 for r in covered)
    elif tightest:
        covered = [r for r in rows if r.clients == crowd]
        bucket = min(r.deadline_s or 0.0 for r in covered)
    else:
        return []
    return [r for r in covered if r.deadline_s == bucket]


def _fits(row: PlanRow, m: Means) -> bool:
    """Within the request's thinking cap, its ceiling (mean usage with a margin: the worst
    case, samples x (thinking + answer), is rarely reached, and the allowance holds the
    ceiling whatever the plan spends) and the context."""
    if m.thinking_cap is not None and (row.thinking is None or row.thinking > m.thinking_cap):
        return False
    if m.tokens is not None and row.tokens * USAGE_MARGIN > m.tokens:
        return False
    return (row.thinking or 0) + m.answer <= m.room


def _best(rows: Iterable[PlanRow]) -> PlanRow | None:
    return max(rows, key=lambda r: (r.accuracy, -r.tokens), default=None)


def choose(ctx: StrategyContext) -> tuple[Plan, Means]:
    request, engine, allowance = ctx.request, ctx.engine, ctx.allowance
    load = engine.load()
    means = Means(
        tokens=allowance.left(),
        seconds=_seconds(allowance.time_left(), allowance.answer_seconds()),
        seconds_per_token=allowance.speed.seconds_per_token,
        answer=allowance.limits.answer,
        room=engine.max_model_len - len(request.prompt_token_ids),
        free_rows=_free(load),
        load=0.0 if load is None or not load.rows else load.busy / load.rows,
        thinking_cap=request.budget.thinking,
        deadline=_until_deadline(allowance),
        crowd=_crowd(ctx),
    )
    table = ctx.resources.get(TABLE_KEY)  # attached only in front of its model
    registry = ctx.resources.get(REGISTRY_KEY)
    if table is not None and registry is not None:  # only plans this server can run
        runnable = {
            name
            for name in registry.names()
            if all(ctx.resources.get(key) is not None for key in registry.needs_of(name))
        }
        table = replace(table, rows=tuple(r for r in table.rows if r.strategy in runnable))
    if table is not None:
        plan = table_plan(table, means)
        if plan is not None:
            return plan, means
    return rule_plan(means), means


def _until_deadline(allowance: Allowance) -> float | None:
    left = allowance.time_left()
    return None if left is None else left + allowance.limits.margin_s


def _crowd(ctx: StrategyContext) -> int:
    crowd = ctx.resources.get(CROWD_KEY)
    return 1 if crowd is None else max(1, crowd.in_flight())


def _seconds(left: float | None, answer_s: float) -> float | None:
    return None if left is None else max(0.0, left - answer_s)


def _free(load: EngineLoad | None) -> int:
    return MAX_SAMPLES if load is None else max(1, load.free)


class Auto:
    """``auto``: chooses the plan for the request's budget and the engine's load."""

    name: ClassVar[str] = "auto"
    # tokens and deadline_ms are every strategy's; a thinking budget (an effort's) caps
    # each sample of the plan; auto sets the others itself.
    budget_fields: ClassVar[frozenset[str]] = frozenset({"thinking"})
    # ``adaptive: false`` runs a sampling plan whole (the stop rule off: a comparison's).
    body_options: ClassVar[frozenset[str]] = frozenset({STOP_FLAG})
    # The chosen plan may draw many samples: progress events, then the answer.
    streams_live: ClassVar[bool] = False
    honours_response_format: ClassVar[bool] = True
    honours_tools: ClassVar[bool] = True
    returns_logprobs: ClassVar[bool] = True

    def validate(self, request: StrategyRequest, engine: Engine) -> None:
        """Nothing of its own: the chosen strategy is checked when it is chosen."""

    async def run(self, ctx: StrategyContext) -> AsyncGenerator[StrategyEvent, None]:
        plan, means = choose(ctx)
        strategy = _strategy(ctx, plan.strategy)
        fields = strategy.budget_fields  # plain takes none, elastic no samples
        budget = Budget(
            thinking=plan.thinking if "thinking" in fields else None,
            samples=plan.samples if "samples" in fields else None,
            tokens=ctx.request.budget.tokens,
            deadline_ms=ctx.request.budget.deadline_ms,
        )
        request = replace(ctx.request, budget=budget, options=_plan_options(ctx, plan))
        strategy.validate(request, ctx.engine)
        why: dict[str, JSON] = {
            **plan.info(),
            "for": {
                "tokens": means.tokens,
                "seconds": None if means.seconds is None else round(means.seconds, 3),
                "seconds_per_token": round(means.seconds_per_token, 6),
                "free_rows": means.free_rows,
                "load": round(means.load, 3),
                "in_flight": means.crowd,
            },
        }
        run = strategy.run(replace(ctx, request=request))
        try:
            async for event in run:
                if isinstance(event, ChoiceDelta):
                    continue  # the answer comes whole with the result (not live)
                if isinstance(event, Result):
                    info = {**event.info, "strategy": "auto", "auto": {**why, **_stages(event)}}
                    yield replace(event, info=info)
                    return
                yield event
        finally:
            await run.aclose()


def _plan_options(ctx: StrategyContext, plan: Plan) -> dict[str, JSON]:
    """The chosen strategy's options: a vote drawn in stages that stops once settled
    (``strategies.vote_stop``), unless the request says ``adaptive: false``."""
    if plan.strategy != "self-consistency" or plan.samples < 2:
        return {}
    wanted = ctx.request.options.get(STOP_FLAG, True)
    if not isinstance(wanted, bool):
        raise InvalidRequest(f"{STOP_FLAG} must be true or false", param=STOP_FLAG)
    if not wanted:
        return {}
    table = ctx.resources.get(TABLE_KEY)
    fitted = table.stop_confidence if table is not None else None
    return {STOP_FLAG: True} if fitted is None else {STOP_FLAG: True, STOP_CONFIDENCE: fitted}


def _stages(result: Result) -> dict[str, JSON]:
    """What the stop rule did: the stages drawn, why the draw ended, the samples left."""
    adaptive = result.info.get("adaptive")
    if not isinstance(adaptive, dict):
        return {}
    cap, drawn = adaptive.get("cap"), result.info.get("samples")
    unspent = cap - drawn if isinstance(cap, int) and isinstance(drawn, int) else None
    return {
        "stages": adaptive.get("rounds"),
        "stopped": adaptive.get("stopped"),
        "unspent_samples": unspent,
    }


def _strategy(ctx: StrategyContext, name: str) -> Strategy:
    registry = ctx.resources.get(REGISTRY_KEY)
    if registry is None or name not in registry.names():
        raise BackendUnavailable(
            f"auto chose {name!r}, which this server does not load (--strategies)",
            param="strategy",
            code="resource_unavailable",
        )
    return registry.get(name)


def accuracy_interval(correct: int, total: int) -> tuple[float, float]:
    """Wilson's 95% interval of an accuracy (the calibration report's)."""
    if total == 0:
        return 0.0, 1.0
    z = 1.96
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)
