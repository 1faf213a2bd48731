"""Offline PETS against an engine: batch jobs with one total sample budget.

A job holds many questions (``custom_id`` + prompt) and a total budget. It runs the
OKG allocator of :mod:`strategies.pets.okg`: a warm-up (one engine request per
question, ``n = warm_up``), then rounds in which the ``round_size`` questions of highest
``R+`` each get one sample; all engine requests of a round are in flight at once (at
most ``max_in_flight``), so vLLM batches them. Each answer updates its question's
posterior; the final answer is the majority of the question's samples.

Jobs live in memory only (:class:`BatchJobs`): they are lost on restart, and
``BatchJobs.aclose`` cancels the running ones (aborting their engine requests) at
shutdown. Output lines follow OpenAI's batch output format (``custom_id`` +
``response.body`` holding a ``chat.completion`` with a ``thinkgate`` object).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from strategies.answers import equivalent, extract_answer, normalize
from strategies.base import JSON
from strategies.engine import Engine, GenerateRequest, ModelTokens, Sample, SamplingConfig
from strategies.errors import BackendError, InvalidBudget, InvalidRequest, NotFound
from strategies.pets.labels import Label
from strategies.pets.okg import OkgAllocator, OkgConfig
from strategies.reasoning import split_ids, thinking_open_after

Status = Literal["in_progress", "completed", "failed", "cancelled"]
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
RESOURCE_KEY: Final = "pets_batches"  # Resources item: BatchJobs


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


@dataclass(slots=True)
class _Kept:
    """What a question keeps per answer class: the first sample's text, for output."""

    reasoning: str
    content: str
    finish_reason: str


@dataclass(slots=True)
class _Tally:
    reps: list[str]  # normalised representative per label
    kept: dict[Label, _Kept]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0


class BatchJob:
    """One job: its questions, allocation state, counters and result."""

    def __init__(
        self,
        job_id: str,
        questions: Sequence[BatchQuestion],
        options: BatchOptions,
        *,
        model: str,
        tokens: ModelTokens,
    ) -> None:
        self.id = job_id
        self.questions = tuple(questions)
        self.options = options
        self.model = model
        self._tokens = tokens
        self.status: Status = "in_progress"
        self.error: str | None = None
        self.created_at = int(time.time())
        self.completed_at: int | None = None
        self.rounds = 0
        self.alloc = OkgAllocator(len(self.questions), options.okg())
        self._tally = [_Tally(reps=[], kept={}) for _ in self.questions]
        self._changed = asyncio.Condition()
        self._version = 0
        self.task: asyncio.Task[None] | None = None

    # --- running

    async def run(self, engine: Engine) -> None:
        """Draw until the budget is spent or every question is at its cap."""
        gate = asyncio.Semaphore(self.options.max_in_flight)
        try:
            warm = self.alloc.warmup_round()
            await self._round(engine, gate, warm)
            while chosen := self.alloc.next_round():
                await self._round(engine, gate, [(q, 1) for q in chosen])
            self._finish("completed")
        except asyncio.CancelledError:
            self._finish("cancelled")
            raise
        except Exception as exc:  # the job fails; the server keeps serving
            while isinstance(exc, ExceptionGroup) and exc.exceptions:  # a round's TaskGroup
                exc = exc.exceptions[0]
            self.error = f"{type(exc).__name__}: {exc}"
            self._finish("failed")

    async def _round(
        self, engine: Engine, gate: asyncio.Semaphore, plan: Sequence[tuple[int, int]]
    ) -> None:
        async with asyncio.TaskGroup() as group:
            for q, n in plan:
                group.create_task(self._draw(engine, gate, q, n))
        self.rounds += 1
        await self._notify()

    async def _draw(self, engine: Engine, gate: asyncio.Semaphore, q: int, n: int) -> None:
        question = self.questions[q]
        drawn = int(self.alloc.used[q])
        sampling = replace(question.sampling, n=n)
        if sampling.seed is not None:  # child j gets seed + j: one stream per sample
            sampling = replace(sampling, seed=sampling.seed + q * self.options.cap + drawn)
        request = GenerateRequest(
            request_id=f"{self.id}-{q}-{drawn}",
            prompt_token_ids=question.prompt_token_ids,
            sampling=sampling,
        )
        async with gate:
            try:
                samples = await engine.generate(request)
            except BaseException:
                for _ in range(n):
                    self.alloc.cancel(q)
                raise
        if len(samples) != n:
            raise BackendError(f"engine returned {len(samples)} of {n} samples")
        self._tally[q].prompt_tokens += len(question.prompt_token_ids)
        for sample in samples:
            self.alloc.observe(q, self._label(q, sample))

    def _label(self, q: int, sample: Sample) -> Label:
        tally = self._tally[q]
        question = self.questions[q]
        split = split_ids(sample.token_ids, self._tokens, thinking_open=question.thinking_open)
        tally.completion_tokens += len(sample.token_ids)
        tally.reasoning_tokens += split.reasoning_tokens
        content = self._tokens.decode(split.content_ids)
        answer = extract_answer(content)
        label: Label = None
        if answer is not None:
            label = next((i for i, rep in enumerate(tally.reps) if equivalent(rep, answer)), None)
            if label is None:
                tally.reps.append(normalize(answer))
                label = len(tally.reps) - 1
        if label not in tally.kept:
            tally.kept[label] = _Kept(
                reasoning=self._tokens.decode(split.reasoning_ids),
                content=content,
                finish_reason=sample.finish_reason,
            )
        return label

    def _finish(self, status: Status) -> None:
        self.status = status
        self.completed_at = int(time.time())
        self._version += 1
        # Wake watchers without awaiting (this may run inside a cancellation).
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._version += 1
            self._changed.notify_all()

    async def watch(self) -> AsyncIterator[dict[str, JSON]]:
        """Snapshots: now, then after every round, until the job ends."""
        seen = -1
        while True:
            async with self._changed:
                if self._version == seen:
                    await self._changed.wait()
                seen = self._version
            snap = self.snapshot()
            yield snap
            if self.status in TERMINAL:
                return

    # --- reporting

    def snapshot(self) -> dict[str, JSON]:
        """The batch object (OpenAI batch fields where they fit, plus ``pets``)."""
        done = len(self.questions) if self.status == "completed" else 0
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": "/v1/pets/batches",
            "model": self.model,
            "status": self.status,
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "errors": None if self.error is None else {"data": [{"message": self.error}]},
            "request_counts": {
                "total": len(self.questions),
                "completed": done,
                "failed": len(self.questions) if self.status == "failed" else 0,
            },
            "pets": {
                "total_budget": self.options.total_budget,
                "cap": self.options.cap,
                "round_size": self.options.round_size,
                "samples_drawn": int(self.alloc.used.sum()),
                "samples_in_flight": int(self.alloc.pending.sum()),
                "rounds": self.rounds,
                "questions_sampled": int((self.alloc.used > 0).sum()),
            },
        }

    def output_lines(self) -> list[dict[str, JSON]]:
        """One OpenAI batch output line per question, in input order."""
        lines: list[dict[str, JSON]] = []
        for q, question in enumerate(self.questions):
            result = self.alloc.result(q)
            tally = self._tally[q]
            kept = tally.kept.get(result.answer) or tally.kept.get(None)
            votes: list[JSON] = [
                {"answer": tally.reps[label], "count": count} for label, count in result.votes
            ]
            answer = tally.reps[result.answer] if result.answer is not None else None
            message: dict[str, JSON] = {
                "role": "assistant",
                "content": kept.content if kept else "",
                "reasoning_content": kept.reasoning if kept else "",
                "reasoning": kept.reasoning if kept else "",
            }
            body: dict[str, JSON] = {
                "id": f"chatcmpl-{self.id}-{q}",
                "object": "chat.completion",
                "created": self.completed_at or self.created_at,
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": kept.finish_reason if kept else "abort",
                    }
                ],
                "usage": {
                    "prompt_tokens": tally.prompt_tokens,
                    "completion_tokens": tally.completion_tokens,
                    "total_tokens": tally.prompt_tokens + tally.completion_tokens,
                    "completion_tokens_details": {"reasoning_tokens": tally.reasoning_tokens},
                },
                "thinkgate": {
                    "strategy": "pets-offline",
                    "samples": result.samples,
                    "votes": votes,
                    "answer": answer,
                    "discarded": result.discarded,
                },
            }
            lines.append(
                {
                    "id": f"{self.id}-{q}",
                    "custom_id": question.custom_id,
                    "response": {"status_code": 200, "body": body},
                    "error": None,
                }
            )
        return lines


def options_from(params: Mapping[str, str], n_questions: int, *, max_cap: int) -> BatchOptions:
    """Options from query parameters: ``total_budget`` or ``average_budget`` (one of
    them), ``cap``, ``round_size``, ``seed``, ``draws``. Raises ``InvalidBudget``."""

    def number(name: str, kind: type[int] | type[float]) -> int | float | None:
        raw = params.get(name)
        if raw is None:
            return None
        try:
            return kind(raw)
        except ValueError:
            raise InvalidBudget(f"{name} must be a number, got {raw!r}", param=name) from None

    total, average = number("total_budget", int), number("average_budget", float)
    if (total is None) == (average is None):
        raise InvalidBudget("set exactly one of total_budget and average_budget", param="budget")
    budget = int(total) if total is not None else int(round(float(average or 0) * n_questions))
    cap = int(number("cap", int) or min(64, max_cap))
    round_size = int(number("round_size", int) or 16)
    if budget < 1:
        raise InvalidBudget("the total budget must be >= 1 sample", param="total_budget")
    if not 1 <= cap <= max_cap:
        raise InvalidBudget(f"cap must be in [1, {max_cap}]", param="cap")
    if round_size < 1:
        raise InvalidBudget("round_size must be >= 1", param="round_size")
    draws = int(number("draws", int) or 500)
    if not 1 <= draws <= 10_000:
        raise InvalidBudget("draws must be in [1, 10000]", param="draws")
    return BatchOptions(
        total_budget=budget,
        cap=cap,
        round_size=round_size,
        draws=draws,
        seed=int(number("seed", int) or 0),
    )


class BatchJobs:
    """The in-memory job store of one server (lost on restart; see module docs)."""

    def __init__(self, engine: Engine, *, max_jobs: int = 64) -> None:
        self._engine = engine
        self._jobs: dict[str, BatchJob] = {}
        self._max_jobs = max_jobs
        self._ids = itertools.count()

    def submit(self, questions: Sequence[BatchQuestion], options: BatchOptions) -> BatchJob:
        running = sum(1 for j in self._jobs.values() if j.status not in TERMINAL)
        if running >= self._max_jobs:
            raise InvalidRequest(f"{running} batch jobs are running; the limit is {self._max_jobs}")
        job_id = f"pbatch_{uuid.uuid4().hex[:16]}"
        job = BatchJob(
            job_id, questions, options, model=self._engine.model_name, tokens=self._engine.tokens
        )
        self._jobs[job_id] = job
        job.task = asyncio.get_running_loop().create_task(job.run(self._engine), name=job_id)
        return job

    def get(self, job_id: str) -> BatchJob:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFound(f"no batch {job_id!r}", param="batch_id") from None

    async def cancel(self, job_id: str) -> BatchJob:
        job = self.get(job_id)
        if job.task is not None and not job.task.done():
            job.task.cancel()
            await asyncio.gather(job.task, return_exceptions=True)
        return job

    async def aclose(self) -> None:
        """Cancel every running job (shutdown); their engine requests are aborted."""
        tasks = [j.task for j in self._jobs.values() if j.task is not None and not j.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
