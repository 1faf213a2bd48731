"""A batch's offline allocation: one total sample budget spread over its questions (PETS,
OKG), chosen with the batch's ``allocation`` field instead of each line's own strategy.

``client.batches.create(..., extra_body={"allocation": {"method": "pets",
"average_budget": 8}})`` (or ``total_budget``; also ``cap``, ``round_size``, ``seed``,
``draws``, as the PETS batch route takes them). The batch's chat lines become the
questions of one PETS job (``server.batches.pets``: its samples kept in the same store
as the batches, so any gateway resumes it); the batch runner that holds the batch's lease
watches the job and, once it ends, answers every line from it at once (a chat completion
with the job's ``thinkgate`` object, as the PETS route renders it). The batch object
shows ``allocation`` with the job's id (``GET /v1/pets/batches/{job_id}`` and its
``/events`` show its progress). A cancel stops the job; a job that fails answers every
line with a 500 naming why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from core.base import JSON
from core.engine import SamplingConfig
from core.errors import GatewayError, InvalidRequest
from server.batches.pets.job import BatchView
from server.batches.pets.service import BatchJobs
from server.batches.pets.store import TERMINAL
from server.batches.pets_wire import batch_object, options_from, output_lines, parse_lines
from server.batches.records import Line, new_id
from server.tenancy.tenants import Keyring

METHODS: Final = ("pets",)
ENDPOINT: Final = "/v1/chat/completions"
OPTIONS: Final = ("method", "total_budget", "average_budget", "cap", "round_size", "seed", "draws")
# Per-line fields that would contradict the batch's one plan.
LINE_PLANS: Final = ("strategy", "budget", "reasoning_effort", "n")

# (line index, ok, the line's answer as the output or error file holds it)
Answered = tuple[int, bool, dict[str, JSON]]


def check(value: object, endpoint: str) -> dict[str, JSON]:
    """The ``allocation`` field of a batch create, checked for what needs no engine."""
    if not isinstance(value, dict):
        raise InvalidRequest("allocation must be an object", param="allocation")
    unknown = sorted(set(value) - set(OPTIONS))
    if unknown:
        raise InvalidRequest(
            f"allocation has unknown field {unknown[0]!r}; it takes {', '.join(OPTIONS)}",
            param=f"allocation.{unknown[0]}",
        )
    if value.get("method") not in METHODS:
        raise InvalidRequest(
            f"allocation.method must be one of {', '.join(METHODS)}", param="allocation.method"
        )
    if endpoint != ENDPOINT:
        raise InvalidRequest(
            f"an allocation batch answers {ENDPOINT} lines; this batch's endpoint is {endpoint}",
            param="endpoint",
        )
    for name, item in value.items():
        if name != "method" and (isinstance(item, bool) or not isinstance(item, int | float)):
            raise InvalidRequest(f"allocation.{name} must be a number", param=f"allocation.{name}")
    return dict(value)


def tenant_cap(max_cap: int, keys: Keyring | None, tenant: str) -> int:
    """A job's largest samples per question: the server's cap, or the tenant's own
    ``budget_samples`` where lower (a tenant held to 4 samples a request is held to 4
    a question in its batch jobs too)."""
    found = None if keys is None or not keys.enabled else keys.named(tenant)
    own = None if found is None else found.limits.budget_samples
    return max_cap if own is None else min(max_cap, own)


@dataclass(frozen=True, slots=True)
class PetsAllocations:
    """Batches whose lines are one PETS job on this gateway's job service."""

    jobs: BatchJobs
    max_cap: int  # the server's max_samples
    keys: Keyring | None = None  # the tenants, whose own sample budgets cap their jobs

    async def submit(
        self, allocation: Mapping[str, JSON], lines: Sequence[Line], *, tenant: str
    ) -> str:
        """Start ``tenant``'s job for a checked ``allocation`` over ``lines``; its id."""
        for line in lines:
            for name in LINE_PLANS:
                if name in line.body:
                    raise InvalidRequest(
                        f"line {line.index + 1} sets {name!r}: an allocation batch plans every"
                        " line itself (drop the field, or the batch's allocation)",
                        param="allocation",
                    )
        engine = self.jobs.engine
        text = "\n".join(json.dumps({"custom_id": x.custom_id, "body": x.body}) for x in lines)
        defaults = SamplingConfig(temperature=1.0, max_tokens=engine.max_model_len)
        questions = parse_lines(
            text, engine.tokens, defaults=defaults, max_questions=max(len(lines), 1)
        )
        params = {k: str(v) for k, v in allocation.items() if k != "method"}
        try:
            cap = tenant_cap(self.max_cap, self.keys, tenant)
            options = options_from(params, len(questions), max_cap=cap)
        except GatewayError as exc:  # name the field as the client wrote it
            exc.param = f"allocation.{exc.param}" if exc.param else "allocation"
            raise
        view = await self.jobs.submit(questions, options, tenant=tenant)
        return view.id

    async def progress(self, job_id: str) -> dict[str, JSON]:
        """What the job has done (its ``pets`` object), or nothing when it is gone."""
        try:
            shown = batch_object(await self.jobs.snapshot(job_id))
        except GatewayError:
            return {}
        pets = shown.get("pets")
        return dict(pets) if isinstance(pets, dict) else {}

    async def answers(self, job_id: str, lines: Sequence[Line]) -> list[Answered] | None:
        """Wait for the job to end; every line's answer, or None when it was cancelled."""
        view = await self._ended(job_id)
        by_id = {x.custom_id: x.index for x in lines}
        if view.status == "cancelled":
            return None
        if view.status != "completed":
            message = view.record.error or f"the allocation job ended {view.status}"
            body: JSON = {"error": {"message": message, "type": "server_error"}}
            return [(x.index, False, _line(x.custom_id, 500, body)) for x in lines]
        _, stored = await self.jobs.output(job_id)
        answered: list[Answered] = []
        for doc in output_lines(view, stored):
            custom_id = str(doc["custom_id"])
            response = doc["response"]
            body = response.get("body") if isinstance(response, dict) else None
            answered.append((by_id[custom_id], True, _line(custom_id, 200, body)))
        return answered

    async def cancel(self, job_id: str) -> None:
        view = await self.jobs.snapshot(job_id)
        if view.status not in TERMINAL:
            await self.jobs.cancel(job_id)

    async def _ended(self, job_id: str) -> BatchView:
        view = await self.jobs.snapshot(job_id)
        async for view in self.jobs.watch(job_id):  # noqa: B007 (the last one is the end)
            pass
        return view


def _line(custom_id: str, status: int, body: JSON) -> dict[str, JSON]:
    return {
        "id": new_id("batch_req_"),
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": new_id("req_"), "body": body},
        "error": None,
    }
