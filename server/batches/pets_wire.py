"""The wire formats of PETS batches. In: the OpenAI batch JSONL body (one
``{"custom_id", "body"}`` per line) parsed into ``BatchQuestion`` values, and the
endpoint's query parameters into ``BatchOptions``; every problem is a 400 naming the line
or parameter, before any engine work. Out: a job (``BatchView``) as OpenAI's batch object
(plus ``pets``), the list object, and each question's stored ``QuestionOutcome`` as an
OpenAI batch output line (``custom_id`` + ``response.body`` holding a ``chat.completion``
with a ``thinkgate`` object).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from core.base import JSON
from core.engine import ModelTokens, SamplingConfig
from core.errors import InvalidBudget, InvalidRequest
from server.apis.openai import sdk_fields
from server.apis.openai.protocol import ChatCompletionRequest
from server.apis.openai.validation import validate
from server.batches.pets.input import MAX_TOTAL_BUDGET, BatchOptions, BatchQuestion
from server.batches.pets.job import BatchView
from server.batches.pets.result import QuestionOutcome
from strategies.reasoning import thinking_open_after

_LINE_END = re.compile(r"\r\n|\r|\n")


def checked_body(body: object, n: int) -> ChatCompletionRequest:
    """Line ``n``'s body checked as ``/v1/chat/completions`` checks a request (the same
    model, the same refusals): a 400 naming the line and the field, at submission."""
    try:
        if not isinstance(body, dict):
            raise InvalidRequest("must be a JSON object")
        checked = validate(ChatCompletionRequest, {"model": "-", **body})
        checked.refuse_unsupported()
        sdk_fields.refuse_decided(sdk_fields.CHAT, checked.model_extra or {})
    except InvalidRequest as exc:
        where = f"line {n}: body.{exc.message}" if exc.param else f"line {n}: body: {exc.message}"
        raise InvalidRequest(where, param="input") from None
    return checked


def parse_lines(
    text: str, tokens: ModelTokens, *, defaults: SamplingConfig, max_questions: int
) -> list[BatchQuestion]:
    """Questions of a JSONL body: ``{"custom_id": ..., "body": {"messages": [...], ...}}``.

    ``body`` is checked as the chat route checks a request (``checked_body``); its
    ``temperature``, ``top_p``, ``max_tokens`` (or ``max_completion_tokens``) and
    ``seed`` are used, other fields are not. Raises ``InvalidRequest`` naming the line.
    """
    out: list[BatchQuestion] = []
    seen: set[str] = set()
    # JSONL's lines end at a newline only (``\r\n`` and ``\r`` too, as the Batch API's file
    # check reads them): ``str.splitlines`` would also break at U+2028, \x85, \x1e, ...,
    # which a JSON string may hold raw, and number the lines after them wrongly.
    for n, line in enumerate(_LINE_END.split(text), 1):
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
        checked = checked_body(body, n)
        try:
            ids = tuple(tokens.render_chat(messages))
        except Exception as exc:  # the chat template refused these messages
            raise InvalidRequest(f"line {n}: bad messages ({exc})", param="input") from exc
        sampling = defaults
        if checked.temperature is not None:
            sampling = replace(sampling, temperature=checked.temperature)
        if checked.top_p is not None:
            sampling = replace(sampling, top_p=checked.top_p)
        limit = checked.max_completion_tokens or checked.max_tokens
        if limit is not None:
            cap = defaults.max_tokens
            sampling = replace(sampling, max_tokens=min(limit, cap) if cap else limit)
        if checked.seed is not None:
            sampling = replace(sampling, seed=checked.seed)
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


def batch_object(view: BatchView) -> dict[str, JSON]:
    """The batch object (OpenAI batch fields where they fit, plus ``pets``)."""
    record, in_flight = view.record, view.in_flight
    total = record.n_questions
    return {
        "id": record.id,
        "object": "batch",
        "endpoint": "/v1/pets/batches",
        "model": record.model,
        "status": record.status,
        "created_at": record.created_at,
        "completed_at": record.completed_at,
        "errors": None if record.error is None else {"data": [{"message": record.error}]},
        "request_counts": {
            "total": total,
            "completed": total if record.status == "completed" else 0,
            "failed": total if record.status == "failed" else 0,
        },
        "pets": {
            "total_budget": record.options.total_budget,
            "cap": record.options.cap,
            "round_size": record.options.round_size,
            "samples_drawn": record.samples_drawn,
            "samples_in_flight": in_flight,
            "rounds": record.rounds,
            "questions_sampled": record.questions_sampled,
            "resumed": record.resumed,
        },
    }


def batch_list(views: Sequence[BatchView], *, has_more: bool) -> dict[str, JSON]:
    """OpenAI's list object, newest first."""
    return {
        "object": "list",
        "data": [batch_object(v) for v in views],
        "first_id": views[0].id if views else None,
        "last_id": views[-1].id if views else None,
        "has_more": has_more,
    }


def output_lines(view: BatchView, stored: Sequence[Mapping[str, JSON]]) -> list[dict[str, JSON]]:
    """A finished job's output, one OpenAI batch output line per question in input order.
    A stored document that is already a line (jobs finished before outcomes were stored
    as domain values) passes through unchanged."""
    return [
        dict(doc) if "response" in doc else output_line(view, q, QuestionOutcome.from_json(doc))
        for q, doc in enumerate(stored)
    ]


def output_line(view: BatchView, q: int, outcome: QuestionOutcome) -> dict[str, JSON]:
    record = view.record
    message: dict[str, JSON] = {
        "role": "assistant",
        "content": outcome.content,
        "reasoning_content": outcome.reasoning,
        "reasoning": outcome.reasoning,
    }
    votes: list[JSON] = [{"answer": v.answer, "count": v.count} for v in outcome.votes]
    body: dict[str, JSON] = {
        "id": f"chatcmpl-{record.id}-{q}",
        "object": "chat.completion",
        "created": record.completed_at or record.created_at,
        "model": record.model,
        "choices": [{"index": 0, "message": message, "finish_reason": outcome.finish_reason}],
        "usage": {
            "prompt_tokens": outcome.prompt_tokens,
            "completion_tokens": outcome.completion_tokens,
            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
            "completion_tokens_details": {"reasoning_tokens": outcome.reasoning_tokens},
        },
        "thinkgate": {
            "strategy": "pets-offline",
            "samples": outcome.samples,
            "votes": votes,
            "answer": outcome.answer,
            "discarded": outcome.discarded,
        },
    }
    return {
        "id": f"{record.id}-{q}",
        "custom_id": outcome.custom_id,
        "response": {"status_code": 200, "body": body},
        "error": None,
    }
