"""Which strategy a request runs and with what budget: pure code, no I/O.

Per field, the first source that sets it wins:
``X-Budget-*`` header > body ``budget.*`` > ``reasoning_effort`` (thinking only, a share
of the model's context: ``server.pipeline.effort``) > server default (``Settings.default_*``, only
for fields the strategy honours).

With no strategy named (``X-Strategy`` > body ``strategy``), a request that sets a
thinking or solution budget runs ``Settings.budget_strategy`` (``elastic``), one that
sets ``samples > 1`` runs ``Settings.samples_strategy`` (``self-consistency``), one that
sets only the request's own limits (``tokens``, ``deadline_ms``) runs
``Settings.limits_strategy`` (``auto``), any other ``Settings.default_strategy``
(``plain``). A field the request sets that the strategy does not honour is a 400 naming
where it came from: never silently ignored. ``tokens`` and ``deadline_ms`` belong to the
request, not to a strategy: every strategy honours them (``core.allowance``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from core.budget import Budget
from core.errors import InvalidBudget, InvalidRequest, OverTenantLimit, UnknownStrategy
from server.pipeline.effort import ceiling, thinking_tokens
from server.settings import EFFORTS, Effort, Settings
from server.tenancy.tenants import Tenant

FIELDS: Final = ("thinking", "solution", "samples", "k", "tokens", "deadline_ms", "thinking_min")
HEADERS: Final = {
    "thinking": "X-Budget-Thinking",
    "solution": "X-Budget-Solution",
    "samples": "X-Budget-Samples",
    "k": "X-Budget-K",
    "tokens": "X-Budget-Tokens",
    "deadline_ms": "X-Budget-Deadline-Ms",
    "thinking_min": "X-Budget-Thinking-Min",
}
# Limits of the request as a whole: honoured by every strategy.
REQUEST_FIELDS: Final = frozenset({"tokens", "deadline_ms"})
STRATEGY_HEADER: Final = "X-Strategy"
_INT: Final = re.compile(r"[+-]?\d+")


@dataclass(frozen=True, slots=True)
class _Value:
    value: int
    param: str  # where it came from, as the client spelled it ("X-Budget-Thinking", ...)


def resolve(
    headers: Mapping[str, str],
    body: Mapping[str, object],
    settings: Settings,
    *,
    honoured: Mapping[str, frozenset[str]] | None = None,
    context: int = 512,
    tenant: Tenant | None = None,
) -> tuple[str, Budget]:
    """The strategy name and the budget as applied.

    ``body`` holds the request's ``strategy``, ``budget`` and ``reasoning_effort``
    (absent or None: not set). ``honoured`` maps every installed strategy to its
    ``budget_fields``; with it an unknown strategy and an unhonoured field are 400s.
    ``context`` is the length efforts are shares of (the gateway's ``effort_context``;
    the default is the testbed's). ``tenant``'s budget limits cap what the request may
    ask (over one: a 400 naming the field); a server default or what an effort chose
    is held to them, and a request without a ceiling or deadline gets the tenant's
    (``server.tenancy.tenants``).
    Raises ``InvalidBudget``/``InvalidRequest``/``UnknownStrategy`` naming the param.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    values = _asked(lower, body)
    chosen_effort = _effort_thinking(values, body, settings, context)
    for name, v in values.items():
        _check_range(name, v, settings)
    caps = tenant_caps(tenant)
    _hold_to_tenant(values, caps, tenant)
    strategy, strategy_param = _strategy(lower, body)
    if strategy is None:
        strategy = _default_strategy(values, chosen_effort, settings)
    fields = frozenset(FIELDS)
    if honoured is not None:
        fields = _honoured_fields(values, strategy, strategy_param, honoured)
    applied = _applied(values, fields, caps, settings)
    _check_consistent(values, applied)
    return strategy, Budget(**applied)


def _asked(lower: Mapping[str, str], body: Mapping[str, object]) -> dict[str, _Value]:
    """The budget fields the request sets: each from its ``X-Budget-*`` header, else
    from the body's ``budget`` (``lower``: the headers by lower-case name)."""
    values: dict[str, _Value] = {}
    body_budget = _body_budget(body.get("budget"))
    for name in FIELDS:
        header = HEADERS[name]
        if (raw := lower.get(header.lower())) is not None:
            values[name] = _Value(_parse_header(raw, header), header)
        elif (bv := body_budget.get(name)) is not None:
            values[name] = _Value(_check_int(bv, f"budget.{name}"), f"budget.{name}")
    return values


def _effort_thinking(
    values: dict[str, _Value], body: Mapping[str, object], settings: Settings, context: int
) -> Effort | None:
    """The body's ``reasoning_effort`` (None: not set, or a thinking budget set already),
    its thinking budget added to ``values``."""
    effort = body.get("reasoning_effort")
    if effort is None or "thinking" in values:
        return None
    chosen = _effort(effort)
    values["thinking"] = _Value(thinking_tokens(settings, chosen, context), "reasoning_effort")
    return chosen


def _hold_to_tenant(
    values: dict[str, _Value], caps: Mapping[str, int], tenant: Tenant | None
) -> None:
    """Over a tenant's cap: what an effort chose is lowered to it, what the request
    asked is a 400 naming the field and the limit."""
    for name, v in list(values.items()):
        cap = caps.get("thinking" if name == "thinking_min" else name)
        if cap is None or v.value <= cap:
            continue
        if v.param == "reasoning_effort":  # chosen for the client, not asked
            values[name] = _Value(cap, v.param)
            continue
        assert tenant is not None
        raise OverTenantLimit(
            f"{v.param} is {v.value}; tenant {tenant.name!r} may ask for at most {cap}",
            param=v.param,
            limit=f"budget_{name.removesuffix('_min')}",
        )


def _default_strategy(
    values: dict[str, _Value], chosen_effort: Effort | None, settings: Settings
) -> str:
    """The strategy of a request that names none, chosen by the budget it sets."""
    per_sample = {"thinking", "solution", "thinking_min", "samples", "k"} & values.keys()
    if chosen_effort is not None and per_sample == {"thinking"}:
        # An effort alone is a whole plan: auto under the effort's ceiling, the effort's
        # thinking capping each sample (server.pipeline.effort).
        if "tokens" not in values:
            cap = ceiling(settings, chosen_effort, values["thinking"].value)
            values["tokens"] = _Value(max(1, cap), "reasoning_effort")
        return settings.limits_strategy
    if "thinking" in values or "solution" in values or "thinking_min" in values:
        return settings.budget_strategy
    if "samples" in values and values["samples"].value > 1:
        return settings.samples_strategy
    if REQUEST_FIELDS & values.keys():
        return settings.limits_strategy
    return settings.default_strategy


def _honoured_fields(
    values: Mapping[str, _Value],
    strategy: str,
    strategy_param: str,
    honoured: Mapping[str, frozenset[str]],
) -> frozenset[str]:
    """The fields ``strategy`` honours (with the request's own); an unknown strategy or
    a field it does not honour is a 400 naming where it came from."""
    if strategy not in honoured:
        why = "" if strategy_param else " (chosen by default for the budget given)"
        raise UnknownStrategy(
            f"unknown strategy {strategy!r}{why}; available: {', '.join(sorted(honoured))}",
            param=strategy_param or "strategy",
        )
    fields = honoured[strategy] | REQUEST_FIELDS
    for name, v in values.items():
        if name not in fields:
            takes = ", ".join(sorted(fields)) or "no budget"
            raise InvalidBudget(
                f"strategy {strategy!r} does not honour the {name} budget (from {v.param}); "
                f"it takes: {takes}",
                param=v.param,
            )
    return fields


def _applied(
    values: Mapping[str, _Value],
    fields: frozenset[str],
    caps: Mapping[str, int],
    settings: Settings,
) -> dict[str, int]:
    """The budget as applied: what the request set, the server's defaults for the
    fields the strategy honours, all held to the tenant's caps."""
    applied = {name: v.value for name, v in values.items()}
    for name in FIELDS:
        default = getattr(settings, f"default_{name}", None)  # the per-sample ones
        if name not in applied and name in fields and default is not None:
            applied[name] = default
    for name, cap in caps.items():
        if name in applied:
            applied[name] = min(applied[name], cap)  # a default the tenant may not have
        elif name in REQUEST_FIELDS:
            # The request's worst case is the tenant's limit. (A strategy's own default
            # sample count is left alone: raising it to the cap would cost more.)
            applied[name] = cap
    return applied


def _check_consistent(values: Mapping[str, _Value], applied: Mapping[str, int]) -> None:
    """``k`` within ``samples``, ``thinking_min`` within ``thinking``."""
    if "k" in applied and "samples" in applied and applied["k"] > applied["samples"]:
        param = values["k"].param if "k" in values else "k"
        raise InvalidBudget(
            f"k ({applied['k']}) cannot exceed samples ({applied['samples']})", param=param
        )
    minimum, thinking = applied.get("thinking_min"), applied.get("thinking")
    if minimum is not None and thinking is not None and minimum > thinking:
        param = values["thinking_min"].param if "thinking_min" in values else "thinking_min"
        raise InvalidBudget(
            f"{param} ({minimum}) cannot exceed the thinking budget ({thinking})", param=param
        )


def tenant_caps(tenant: Tenant | None) -> dict[str, int]:
    """The budget fields ``tenant`` caps, by name (empty: none)."""
    if tenant is None:
        return {}
    limits = tenant.limits
    caps = {
        "samples": limits.budget_samples,
        "thinking": limits.budget_thinking,
        "tokens": limits.budget_tokens,
        "deadline_ms": limits.budget_deadline_ms,
    }
    return {name: cap for name, cap in caps.items() if cap is not None}


def check_ceiling(budget: Budget, least: int, headers: Mapping[str, str]) -> None:
    """A total-token ceiling must leave room for one answer (``least`` tokens: the
    server's answer reserve, the closing delimiter and one)."""
    if budget.tokens is not None and budget.tokens < least:
        lower = {k.lower() for k in headers}
        param = HEADERS["tokens"] if HEADERS["tokens"].lower() in lower else "budget.tokens"
        raise InvalidBudget(
            f"{param} is {budget.tokens}; the least that leaves room for an answer on this "
            f"server is {least}",
            param=param,
        )


def _strategy(headers: Mapping[str, str], body: Mapping[str, object]) -> tuple[str | None, str]:
    if (raw := headers.get(STRATEGY_HEADER.lower())) is not None:
        name = raw.strip()
        if not name:
            raise UnknownStrategy("X-Strategy is empty", param=STRATEGY_HEADER)
        return name, STRATEGY_HEADER
    value = body.get("strategy")
    if value is None:
        return None, ""
    if not isinstance(value, str) or not value.strip():
        raise UnknownStrategy("strategy must be a non-empty string", param="strategy")
    return value.strip(), "strategy"


def _body_budget(value: object) -> Mapping[str, object]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidBudget(f"budget must be an object {{{', '.join(FIELDS)}}}", param="budget")
    for key in value:
        if key not in FIELDS:
            raise InvalidBudget(
                f"unknown budget field {key!r}; expected {', '.join(FIELDS)}", param=f"budget.{key}"
            )
    return value


def _parse_header(raw: str, param: str) -> int:
    text = raw.strip()
    if not _INT.fullmatch(text):
        raise InvalidBudget(f"{param} must be a non-negative integer, got {raw!r}", param=param)
    return int(text)


def _check_int(value: object, param: str) -> int:
    # bool is an int subclass: `true` as a budget is a client bug, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidBudget(
            f"{param} must be a non-negative integer, got {type(value).__name__} {value!r}",
            param=param,
        )
    return value


def _check_range(name: str, v: _Value, settings: Settings) -> None:
    low = 1 if name in ("samples", "k", "tokens", "deadline_ms") else 0
    high = {
        "samples": settings.max_samples,
        "k": settings.max_samples,
        "tokens": settings.max_budget_tokens * settings.max_samples,
        "deadline_ms": settings.max_deadline_ms,
    }.get(name, settings.max_budget_tokens)
    if v.value < low:
        what = "a positive" if low else "a non-negative"
        raise InvalidBudget(f"{v.param} must be {what} integer, got {v.value}", param=v.param)
    if v.value > high:
        raise InvalidBudget(f"{v.param} is {v.value}; this server's cap is {high}", param=v.param)


def _effort(value: object) -> Effort:
    for effort in EFFORTS:
        if value == effort:
            return effort
    raise InvalidRequest(
        f"reasoning_effort must be one of {', '.join(EFFORTS)}, got {value!r}",
        param="reasoning_effort",
    )
