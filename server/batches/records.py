"""Files and batches as values, and as the OpenAI API renders them."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Final, Literal

from core.base import JSON

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired",
    "cancelling", "cancelled",
]  # fmt: skip
TERMINAL: Final = frozenset({"failed", "completed", "expired", "cancelled"})
# What a batch may run (its lines go to the engine): in progress, or being cancelled
# (then only finalised).
RUNNABLE: Final = ("in_progress", "cancelling")
ENDPOINTS: Final = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
WINDOW_S: Final = 24 * 3600  # the one completion window OpenAI offers, "24h"


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRecord:
    id: str
    owner: str  # the tenant
    purpose: str  # batch (uploaded), batch_output (written here)
    filename: str
    bytes: int
    created_at: int

    def render(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Counts:
    total: int = 0
    completed: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRecord:
    id: str
    owner: str  # the tenant
    endpoint: str
    input_file_id: str
    status: BatchStatus
    created_at: int
    expires_at: int
    metadata: dict[str, str] | None = None
    errors: tuple[dict[str, JSON], ...] = ()  # validation errors (a failed batch)
    output_file_id: str | None = None
    error_file_id: str | None = None
    # When it entered each status (unix seconds), by status.
    times: dict[str, int] = field(default_factory=dict)
    # thinkgate's offline allocation over the batch (server.batches.allocation), or None.
    allocation: dict[str, JSON] | None = None

    def render(self, counts: Counts) -> dict[str, JSON]:
        t = self.times
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": {"object": "list", "data": list(self.errors)} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": "24h",
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": t.get("in_progress"),
            "expires_at": self.expires_at,
            "finalizing_at": t.get("finalizing"),
            "completed_at": t.get("completed"),
            "failed_at": t.get("failed"),
            "expired_at": t.get("expired"),
            "cancelling_at": t.get("cancelling"),
            "cancelled_at": t.get("cancelled"),
            "request_counts": {
                "total": counts.total,
                "completed": counts.completed,
                "failed": counts.failed,
            },
            "metadata": dict(self.metadata) if self.metadata is not None else None,
            **({"allocation": dict(self.allocation)} if self.allocation is not None else {}),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    """One request of a batch, as its input file holds it."""

    index: int  # its place in the input file (0-based)
    custom_id: str
    body: dict[str, JSON]
