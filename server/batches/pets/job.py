"""Offline PETS against an engine: one batch job, run with one total sample budget.

A job holds many questions (``custom_id`` + prompt) and a total budget. It runs the
OKG allocator of :mod:`strategies.pets.okg`: a warm-up (one engine request per
question, ``n = warm_up``), then rounds in which the ``round_size`` questions of highest
``R+`` each get one sample; all engine requests of a round are in flight at once (at
most ``max_in_flight``), so vLLM batches them. Each answer updates its question's
posterior; the final answer is the majority of the question's samples.

The job lives in a :class:`~server.batches.pets.store.BatchStore`; a :class:`BatchJob` is
its runner in one gateway. Every engine request's samples are stored (one transaction)
before they are counted, so a gateway killed mid-batch loses only the draws in flight,
which were never counted. **Resume is replay**: a new runner re-observes the stored
samples in order (labels are a pure function of the token ids), which rebuilds the
allocator and the tallies, then draws on (warm-up first, for questions that miss it)
until the budget is spent. Per-question outcomes are computed once, at completion, and
stored with the ``completed`` status in the same transaction. A runner holds the job's lease
and renews it every ``lease_s / 3``; when a renewal or a write finds the lease gone
(cancelled, or taken over after it expired), it stops without writing anything more.
Outcomes are domain values (:mod:`server.batches.pets.result`); the server renders
them in OpenAI's batch output format.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from core.base import JSON
from core.engine import Engine, GenerateRequest, ModelTokens, Sample
from core.errors import BackendError, BackendUnavailable, first_error
from server.batches.pets.admitted import Gate
from server.batches.pets.input import BatchQuestion
from server.batches.pets.result import AnswerVotes, QuestionOutcome
from server.batches.pets.store import BatchStore, JobRecord, Status, StoredSample
from strategies.answers import equivalent, extract_answer, normalize
from strategies.pets.labels import Label
from strategies.pets.okg import OkgAllocator
from strategies.reasoning import split_ids

# How a run ended in this process: ``done`` (the store has the outcome), ``lost`` (the
# lease went to someone else, or the job was cancelled elsewhere), ``paused`` (the engine
# is unavailable: the lease is released for a later claim).
Outcome = Literal["done", "lost", "paused"]


@dataclass(frozen=True, slots=True)
class BatchView:
    """A job as a client sees it: the record without who holds its lease (which changes
    with every renewal and is nobody's business), and the samples in flight. Equal
    views look the same on the wire (``server/batches/pets_wire.py`` renders them)."""

    record: JobRecord
    in_flight: int = 0

    @classmethod
    def of(cls, record: JobRecord, *, in_flight: int = 0) -> BatchView:
        return cls(replace(record, owner=None, lease_until=0.0), in_flight)

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def status(self) -> Status:
        return self.record.status


class LeaseLost(Exception):
    """This runner no longer holds its job: stop, write nothing more."""


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
    """The runner of one stored job in this gateway: allocation state, tallies, lease."""

    def __init__(
        self,
        record: JobRecord,
        questions: Sequence[BatchQuestion],
        *,
        tokens: ModelTokens,
        store: BatchStore,
        owner: str,
        lease_s: float,
        gate: Callable[[], Gate | None] = lambda: None,
    ) -> None:
        if len(questions) != record.n_questions:
            raise ValueError(f"job {record.id}: {len(questions)} of {record.n_questions} questions")
        self.record = record
        self.id = record.id
        self.questions = tuple(questions)
        self.options = record.options
        self._tokens = tokens
        self._store = store
        self._owner = owner
        self._lease_s = lease_s
        self._gate = gate  # the tenant's admission, once the server has bound it
        self.status: Status = record.status
        self.error: str | None = record.error
        self.completed_at: int | None = record.completed_at
        self.rounds = 0
        self.outcome: Outcome | None = None
        self.alloc = OkgAllocator(len(self.questions), self.options.okg())
        self._tally = [_Tally(reps=[], kept={}) for _ in self.questions]
        self.changed = asyncio.Event()  # set (and replaced) after every round and at the end

    # --- resuming

    def replay(self, stored: Sequence[StoredSample]) -> None:
        """Re-observe samples stored by earlier runs, in their stored order (before
        ``run``; may be called slice by slice)."""
        for s in stored:
            self.alloc.replay(s.question, self._observe(s.question, s.sample))
            self.rounds = max(self.rounds, s.round + 1)

    # --- running

    async def run(self, engine: Engine) -> None:
        """Draw until the budget is spent or every question is at its cap; sets
        ``outcome``. Cancelling it (a user's cancel, shutdown) writes nothing: the caller
        says what the store should hold. Raises only what the store raises."""
        try:
            self.outcome = await self._run(engine)
        finally:
            self._tick()

    async def _run(self, engine: Engine) -> Outcome:
        try:
            async with asyncio.TaskGroup() as group:
                keeper = group.create_task(self._keep_lease())
                await self._allocate(engine)
                keeper.cancel()
            self.completed_at = int(time.time())
            await self._end("completed", output=[o.to_json() for o in self.outcomes()])
            return "done"
        except Exception as exc:  # the job fails; the server keeps serving
            cause = first_error(exc)  # the rounds' TaskGroups wrap it
        if isinstance(cause, LeaseLost):
            return "lost"
        if isinstance(cause, BackendUnavailable):
            # Not the job's fault (engine restarting, servers down): give it back; a
            # claim picks it up again once the engine serves.
            await self._store.release(self.id, self._owner)
            return "paused"
        self.completed_at = int(time.time())
        try:
            await self._end("failed", error=f"{type(cause).__name__}: {cause}")
        except LeaseLost:
            return "lost"
        return "done"

    async def _allocate(self, engine: Engine) -> None:
        gate = asyncio.Semaphore(self.options.max_in_flight)
        if warm := self.alloc.warmup_round():
            await self._round(engine, gate, warm)
        while chosen := self.alloc.next_round():
            await self._round(engine, gate, [(q, 1) for q in chosen])

    async def _end(
        self, status: Status, *, error: str | None = None, output: Sequence[dict[str, JSON]] = ()
    ) -> None:
        assert self.completed_at is not None
        done = await self._store.finish(
            self.id,
            self._owner,
            status=status,
            completed_at=self.completed_at,
            error=error,
            output=output,
        )
        if not done:
            raise LeaseLost(self.id)
        self.status, self.error = status, error

    async def _keep_lease(self) -> None:
        """Renew every ``lease_s / 3``. A renewal refused means the job is someone
        else's (or cancelled): stop. Renewals that fail (the database is busy) are
        retried, but never past the lease itself: a runner that could not renew in
        ``lease_s`` must assume another gateway has claimed the job."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self._lease_s / 3)
            try:
                held = await self._store.renew(self.id, self._owner, lease_s=self._lease_s)
            except Exception:
                if time.monotonic() - renewed > self._lease_s:
                    raise LeaseLost(self.id) from None
                continue
            if not held:
                raise LeaseLost(self.id)
            renewed = time.monotonic()

    async def _round(
        self, engine: Engine, gate: asyncio.Semaphore, plan: Sequence[tuple[int, int]]
    ) -> None:
        round_ = self.rounds
        async with asyncio.TaskGroup() as group:
            for q, n in plan:
                group.create_task(self._draw(engine, gate, q, n, round_))
        self.rounds = round_ + 1
        self._tick()

    async def _draw(
        self, engine: Engine, gate: asyncio.Semaphore, q: int, n: int, round_: int
    ) -> None:
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
        try:
            async with gate:
                samples = await self._generate(engine, request)
            if len(samples) != n:
                raise BackendError(f"engine returned {len(samples)} of {n} samples")
            stored = [StoredSample(question=q, round=round_, sample=s) for s in samples]
            # Stored before counted: what a snapshot reports survives a kill.
            if not await self._store.add_samples(self.id, self._owner, stored):
                raise LeaseLost(self.id)
        except BaseException:
            for _ in range(n):
                self.alloc.cancel(q)
            raise
        for sample in samples:
            self.alloc.observe(q, self._observe(q, sample))

    async def _generate(self, engine: Engine, request: GenerateRequest) -> list[Sample]:
        """One draw, admitted as the tenant's (``admitted.TenantGate``) where bound."""
        gate = self._gate()
        if gate is None:
            return list(await engine.generate(request))
        n, limit = request.sampling.n, request.sampling.max_tokens
        reserve = n * (limit if limit is not None else engine.max_model_len)
        release = await gate.enter(self.record.tenant, n, reserve)
        spent = 0
        try:
            samples = list(await engine.generate(request))
            spent = sum(len(s.token_ids) for s in samples)
            return samples
        finally:
            release(spent)

    def _observe(self, q: int, sample: Sample) -> Label:
        """Tally one sample of question ``q`` and return its label (deterministic in the
        order samples are observed: replay relies on it)."""
        tally = self._tally[q]
        question = self.questions[q]
        if sample.index == 0:  # the engine request bills its prompt once
            tally.prompt_tokens += len(question.prompt_token_ids)
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

    def _tick(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    # --- reporting

    def view(self) -> JobRecord:
        """The stored record with this runner's live counters."""
        return replace(
            self.record,
            status=self.status,
            completed_at=self.completed_at,
            error=self.error,
            samples_drawn=int(self.alloc.used.sum()),
            questions_sampled=int((self.alloc.used > 0).sum()),
            rounds=self.rounds,
        )

    def snapshot(self) -> BatchView:
        return BatchView.of(self.view(), in_flight=int(self.alloc.pending.sum()))

    def outcomes(self) -> list[QuestionOutcome]:
        """Each question's result, in input order (what ``finish`` stores)."""
        out: list[QuestionOutcome] = []
        for q, question in enumerate(self.questions):
            result = self.alloc.result(q)
            tally = self._tally[q]
            kept = tally.kept.get(result.answer) or tally.kept.get(None)
            out.append(
                QuestionOutcome(
                    custom_id=question.custom_id,
                    content=kept.content if kept else "",
                    reasoning=kept.reasoning if kept else "",
                    finish_reason=kept.finish_reason if kept else "abort",
                    answer=tally.reps[result.answer] if result.answer is not None else None,
                    votes=tuple(
                        AnswerVotes(answer=tally.reps[label], count=count)
                        for label, count in result.votes
                    ),
                    samples=result.samples,
                    discarded=result.discarded,
                    prompt_tokens=tally.prompt_tokens,
                    completion_tokens=tally.completion_tokens,
                    reasoning_tokens=tally.reasoning_tokens,
                )
            )
        return out
