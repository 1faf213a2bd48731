"""Where PETS batch jobs live: the store interface and the values that cross it.

A store keeps, per job, what was submitted (questions, options), every sample drawn
(token ids, in the order they were stored), the outcome, and who runs it now: a *lease*
(``owner`` + ``lease_until``, wall-clock seconds) that its runner renews. A job runs
where its lease is; a runner whose lease is gone must stop without writing, and every
write below is conditional on the writer still holding the job, so two gateways never
both add to one job. ``server.batches.pets.sql_store`` is the implementation: one
SQLite file, or a PostgreSQL database shared by several gateways.

The JSON forms of questions and options are here so every implementation stores the
same thing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Final, Literal, Protocol

from core.base import JSON
from core.engine import Sample, SamplingConfig
from server.batches.pets.input import BatchOptions, BatchQuestion

Status = Literal["in_progress", "completed", "failed", "cancelled"]
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """A job as the store has it (progress counters included; questions are separate)."""

    id: str
    model: str
    status: Status
    options: BatchOptions
    n_questions: int
    created_at: int
    completed_at: int | None = None
    error: str | None = None
    owner: str | None = None  # the gateway running it; None: nobody
    lease_until: float = 0.0  # wall clock; past it, any gateway of the model may claim it
    resumed: int = 0  # claims after the first run (restarts, take-overs)
    samples_drawn: int = 0
    questions_sampled: int = 0
    rounds: int = 0  # rounds that stored a sample
    tenant: str = ""  # who submitted it (server.tenancy.tenants); "": a job from before tenants


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredSample:
    """One sample as stored: its question, the allocation round that drew it, and the
    engine's sample (``sample.index`` 0 is the first of its engine request, which is
    the one that bills the prompt)."""

    question: int
    round: int
    sample: Sample


class BatchStore(Protocol):
    """The whole interface between batch jobs and their database.

    ``owner`` is a gateway process's id. Writes that take it succeed only while that
    owner holds the job and the job is in progress; they return False otherwise (the
    caller has lost the job: it stops and writes nothing more).
    """

    async def create(
        self,
        job: JobRecord,
        questions: Sequence[BatchQuestion],
        *,
        owner: str,
        lease_s: float,
    ) -> None:
        """Insert a new job, leased to ``owner`` for ``lease_s``."""
        ...

    async def job(self, job_id: str) -> JobRecord | None: ...

    async def jobs(
        self,
        *,
        status: Status | None = None,
        after: str | None = None,
        limit: int = 100,
        tenant: str | None = None,
    ) -> list[JobRecord]:
        """Jobs, newest first; ``after``: those listed after that id (a cursor);
        ``tenant``: only that tenant's (and those from before tenants)."""
        ...

    async def questions(self, job_id: str) -> list[BatchQuestion]: ...

    async def samples(self, job_id: str) -> list[StoredSample]:
        """Every stored sample of the job, in the order they were added."""
        ...

    async def add_samples(self, job_id: str, owner: str, samples: Sequence[StoredSample]) -> bool:
        """Store the samples of one engine request, all or none (one transaction)."""
        ...

    async def finish(
        self,
        job_id: str,
        owner: str | None,
        *,
        status: Status,
        completed_at: int,
        error: str | None = None,
        output: Sequence[Mapping[str, JSON]] = (),
    ) -> bool:
        """End an in-progress job with ``status`` (and its per-question outcomes as JSON,
        in order) and clear its lease. ``owner`` None: whoever holds it (a cancel from any
        gateway)."""
        ...

    async def output(self, job_id: str) -> list[dict[str, JSON]]:
        """The per-question documents stored by ``finish``, in order."""
        ...

    async def claim(self, owner: str, *, model: str, lease_s: float, limit: int) -> list[str]:
        """Lease to ``owner`` up to ``limit`` in-progress jobs of ``model`` that nobody
        holds (never leased, released, or lease expired); ids of the jobs it got."""
        ...

    async def renew(self, job_id: str, owner: str, *, lease_s: float) -> bool: ...

    async def release(self, job_id: str, owner: str) -> None:
        """Give the lease up now (shutdown), so any gateway may claim the job at once."""
        ...

    async def aclose(self) -> None: ...


# --- JSON forms shared by every implementation


def options_json(options: BatchOptions) -> str:
    return json.dumps(asdict(options), sort_keys=True)


def options_from_json(text: str) -> BatchOptions:
    return BatchOptions(**json.loads(text))


def sampling_json(sampling: SamplingConfig) -> str:
    return json.dumps(asdict(sampling), sort_keys=True)


def sampling_from_json(text: str) -> SamplingConfig:
    doc = json.loads(text)
    doc["stop"] = tuple(doc.get("stop", ()))
    doc["stop_token_ids"] = tuple(doc.get("stop_token_ids", ()))
    # JSON object keys are strings: token ids come back as ints.
    doc["logit_bias"] = {int(k): float(v) for k, v in doc.get("logit_bias", {}).items()}
    return SamplingConfig(**doc)
