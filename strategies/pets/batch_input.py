"""What a PETS batch job is asked: its questions (parsed from JSONL) and its options.

Both are validated before any engine work, so bad input is a 400 and never a failed
job. The values are frozen: a job's store keeps them as they were submitted (a resumed
job runs on exactly these).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from strategies.engine import ModelTokens, SamplingConfig
from strategies.errors import InvalidBudget, InvalidRequest
from strategies.pets.okg import OkgConfig
from strategies.reasoning import thinking_open_after


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchQuestion:
    custom_id: str
    prompt_token_ids: tuple[int, ...]
    thinking_open: bool
    sampling: SamplingConfig  # n is set per engine request


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchOptions:
    """One job's allocation knobs (query parameters of the endpoint)."""

    total_budget: int
    cap: int = 64
    round_size: int = 16
    warm_up: int = 1
    max_options: int = 16
    draws: int = 500
    seed: int = 0
    max_in_flight: int = 64

    def okg(self) -> OkgConfig:
        return OkgConfig(
            total_budget=self.total_budget,
            cap=self.cap,
            max_options=self.max_options,
            draws=self.draws,
            warm_up=self.warm_up,
            batch=self.round_size,
            seed=self.seed,
        )


def parse_lines(
    text: str, tokens: ModelTokens, *, defaults: SamplingConfig, max_questions: int
) -> list[BatchQuestion]:
    """Questions of a JSONL body: ``{"custom_id": ..., "body": {"messages": [...], ...}}``.

    ``body`` may set ``temperature``, ``top_p``, ``max_tokens`` (or
    ``max_completion_tokens``) and ``seed``; other body fields are ignored. Raises
    ``InvalidRequest`` naming the line.
    """
    out: list[BatchQuestion] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            custom_id = str(doc["custom_id"])
            body = doc["body"]
            messages = [dict(m) for m in body["messages"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidRequest(
                f"line {n}: expected {{custom_id, body: {{messages}}}} ({exc})", param="input"
            ) from exc
        if custom_id in seen:
            raise InvalidRequest(f"line {n}: duplicate custom_id {custom_id!r}", param="input")
        seen.add(custom_id)
        try:
            ids = tuple(tokens.render_chat(messages))
        except Exception as exc:  # the chat template refused these messages
            raise InvalidRequest(f"line {n}: bad messages ({exc})", param="input") from exc
        sampling = defaults
        try:
            if "temperature" in body:
                sampling = replace(sampling, temperature=float(body["temperature"]))
            if "top_p" in body:
                sampling = replace(sampling, top_p=float(body["top_p"]))
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"line {n}: bad sampling field ({exc})", param="input") from exc
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        if limit is not None:
            if not isinstance(limit, int) or limit < 1:
                raise InvalidRequest(f"line {n}: max_tokens must be >= 1", param="input")
            cap = defaults.max_tokens
            sampling = replace(sampling, max_tokens=min(limit, cap) if cap else limit)
        if "seed" in body:
            sampling = replace(sampling, seed=int(body["seed"]))
        out.append(
            BatchQuestion(
                custom_id=custom_id,
                prompt_token_ids=ids,
                thinking_open=thinking_open_after(ids, tokens),
                sampling=sampling,
            )
        )
        if len(out) > max_questions:
            raise InvalidRequest(f"more than {max_questions} questions", param="input")
    if not out:
        raise InvalidRequest("the batch has no questions", param="input")
    return out


MAX_TOTAL_BUDGET = 10**9  # samples; far past any real batch, well inside 64 bits


def options_from(params: Mapping[str, str], n_questions: int, *, max_cap: int) -> BatchOptions:
    """Options from query parameters: ``total_budget`` or ``average_budget`` (one of
    them), ``cap``, ``round_size``, ``seed``, ``draws``. Raises ``InvalidBudget``."""

    def number(name: str, kind: type[int] | type[float], low: float, high: float) -> float | None:
        raw = params.get(name)
        if raw is None:
            return None
        try:
            value = kind(raw)
        except ValueError:
            raise InvalidBudget(f"{name} must be a number, got {raw!r}", param=name) from None
        # NaN, infinities and 64-bit overflows would reach the allocator or the job
        # store (found by the fuzz as 500s): refuse them here, naming the parameter.
        if not (math.isfinite(value) and low <= value <= high):
            raise InvalidBudget(f"{name} must be in [{low:g}, {high:g}], got {raw!r}", param=name)
        return value

    total = number("total_budget", int, 1, MAX_TOTAL_BUDGET)
    average = number("average_budget", float, 0, max_cap)
    if (total is None) == (average is None):
        raise InvalidBudget("set exactly one of total_budget and average_budget", param="budget")
    budget = int(total) if total is not None else int(round(float(average or 0) * n_questions))
    cap = int(number("cap", int, 1, max_cap) or min(64, max_cap))
    round_size = int(number("round_size", int, 1, 100_000) or 16)
    if budget < 1:
        raise InvalidBudget("the total budget must be >= 1 sample", param="total_budget")
    draws = int(number("draws", int, 1, 10_000) or 500)
    seed = int(number("seed", int, 0, 2**63 - 1) or 0)
    return BatchOptions(
        total_budget=budget,
        cap=cap,
        round_size=round_size,
        draws=draws,
        seed=seed,
    )
