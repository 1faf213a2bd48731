"""Fixed plans and how one question is asked under one plan and one budget, shared by
``thinkgate calibrate auto`` (which measures the plans on calibration questions) and
``thinkgate bench budgets`` (which holds them against ``auto`` on held-out ones).

A plan is a strategy with its samples and per-sample thinking budget; the request's own
limits (``tokens``, ``deadline_ms``) go beside it in ``budget``. One question's outcome is
whether the answer was right, the completion tokens billed, the wall time to the last
byte and whether an answer came at all.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from strategies.answers import equivalent


class Asked(Protocol):
    """What a question asked under a plan offers: a calibration ``Question``, or any
    question with a user ``prompt`` and an ``answer`` (the benchmarks' testbed ones)."""

    @property
    def prompt(self) -> str: ...

    @property
    def answer(self) -> object: ...


@dataclass(frozen=True, slots=True)
class FixedPlan:
    strategy: str
    samples: int = 1
    thinking: int | None = None

    @property
    def label(self) -> str:
        t = "" if self.thinking is None else f" t={self.thinking}"
        n = "" if self.samples == 1 else f"@{self.samples}"
        return f"{self.strategy}{n}{t}"

    def budget(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.thinking is not None:
            out["thinking"] = self.thinking
        if self.samples > 1:
            out["samples"] = self.samples
        return out


# What ``auto`` may choose among (its table's rows).
CALIBRATION_GRID: tuple[FixedPlan, ...] = (
    *(FixedPlan("elastic", 1, t) for t in (0, 32, 64, 128, 256, 400)),
    *(FixedPlan("self-consistency", n, t) for n in (2, 4, 8, 16) for t in (32, 64, 128, 256)),
)

# What ``auto`` may choose among under a deadline, each measured with the deadline set
# (``DEADLINES``, at ``CROWDS`` requests in flight), so the table knows what the
# deadline's cuts leave of each. The step searches need the PRM: ``auto`` leaves their
# rows out on a server without one.
DEADLINE_GRID: tuple[FixedPlan, ...] = (
    FixedPlan("plain"),
    FixedPlan("elastic", 1, 128),
    FixedPlan("elastic", 1, 256),
    FixedPlan("self-consistency", 4, 128),
    FixedPlan("self-consistency", 4, 256),
    FixedPlan("self-consistency", 8, 128),
    FixedPlan("deepconf", 8),
    FixedPlan("deepconf", 16),
    FixedPlan("step-rejection", 4),
    FixedPlan("particle-filtering", 4),
)
DEADLINES: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
CROWDS: tuple[int, ...] = (1, 8)


@dataclass(frozen=True, slots=True)
class Outcome:
    right: bool
    answered: bool
    tokens: int
    seconds: float
    late: bool = False  # the last byte after the client's timeout (counted as no answer)
    error: str | None = None  # the HTTP status of a refused request
    answer: str | None = None  # the answer read from the reply
    reasoning_tokens: int = 0  # of ``tokens``, those spent thinking


def _chat(q: Asked) -> list[dict[str, str]]:
    chat = getattr(q, "chat", None)
    if callable(chat):  # a calibration or workload question: its whole conversation
        messages: list[dict[str, str]] = chat()
        return messages
    return [{"role": "user", "content": q.prompt}]


def _graded(q: Asked, content: str, stated: object) -> tuple[bool, str | None]:
    """Whether the reply is right, and the answer read from it: by the question's own
    grader where it has one (a workload question), else as the vote reads answers."""
    grader = getattr(q, "grader", None)
    if grader is not None:
        read = grader.read(content, stated if isinstance(stated, str) else None)
        expected = q.answer
        return (
            read is not None and isinstance(expected, str) and grader.same(read, expected)
        ), read
    answer = stated if isinstance(stated, str) else None
    if answer is None:
        from strategies.answers import extract_answer

        answer = extract_answer(content)
    return answer is not None and equivalent(answer, str(q.answer)), answer


async def ask(
    client: Any,
    model: str,
    q: Asked,
    plan: FixedPlan | None,
    limits: dict[str, int],
    *,
    seed: int,
    timeout_s: float | None = None,
) -> Outcome:
    """One question under ``plan`` (None: ``auto``) and the request's ``limits``; a client
    timeout (a peer's deadline) counts as no answer."""
    import openai

    headers = {"X-Strategy": plan.strategy if plan is not None else "auto"}
    budget = {**(plan.budget() if plan is not None else {}), **limits}
    t0 = time.perf_counter()
    try:
        r = await asyncio.wait_for(
            client.chat.completions.create(
                model=model,
                messages=_chat(q),
                temperature=1.0,
                seed=seed,
                extra_headers=headers,
                extra_body={"budget": budget},
            ),
            timeout=timeout_s,
        )
    except (TimeoutError, openai.APITimeoutError):
        return Outcome(False, False, 0, time.perf_counter() - t0, late=True)
    except openai.APIStatusError as exc:  # counted as no answer, the reason kept
        return Outcome(False, False, 0, time.perf_counter() - t0, error=f"{exc.status_code}")
    seconds = time.perf_counter() - t0
    info = r.choices[0].model_extra.get("thinkgate") or {}
    right, answer = _graded(q, r.choices[0].message.content or "", info.get("answer"))
    details = getattr(r.usage, "completion_tokens_details", None)  # absent: a plain server
    thought = (details.reasoning_tokens if details is not None else None) or 0
    return Outcome(
        right,
        answer is not None,
        r.usage.completion_tokens,
        seconds,
        answer=answer,
        reasoning_tokens=thought,
    )


async def ask_all(
    client: Any,
    model: str,
    qs: Sequence[Asked],
    plan: FixedPlan | None,
    limits: dict[str, int],
    clients: int,
    seed: int,
    bar: Any,
) -> list[Outcome]:
    """Every question under ``plan`` and ``limits``, ``clients`` of them in flight at once
    (question i seeded ``seed x 1000 + i``)."""
    gate = asyncio.Semaphore(clients)

    async def one(i: int, q: Asked) -> Outcome:
        async with gate:
            out = await ask(client, model, q, plan, limits, seed=seed * 1000 + i)
            bar.update(1)
            return out

    return list(await asyncio.gather(*(one(i, q) for i, q in enumerate(qs))))


def summary(outcomes: Sequence[Outcome], deadline_s: float | None = None) -> dict[str, float]:
    """Accuracy (a late answer is none), answered and on-time shares, mean tokens and
    seconds, the 90th percentile of seconds."""
    n = max(1, len(outcomes))
    times = sorted(o.seconds for o in outcomes)
    on_time = (
        1.0
        if deadline_s is None
        else sum(1 for o in outcomes if not o.late and o.seconds <= deadline_s * 1.1) / n
    )
    return {
        "accuracy": sum(1 for o in outcomes if o.right and not o.late) / n,
        "answered": sum(1 for o in outcomes if o.answered and not o.late) / n,
        "on_time": on_time,
        "tokens": sum(o.tokens for o in outcomes) / n,
        "max_tokens": float(max((o.tokens for o in outcomes), default=0)),
        "seconds": sum(times) / n,
        "p90_seconds": times[min(len(times) - 1, int(0.9 * len(times)))] if times else 0.0,
        "questions": float(len(outcomes)),
        "errors": float(sum(1 for o in outcomes if o.error is not None)),
    }
