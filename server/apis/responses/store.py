"""Stored responses: ``store: true`` (OpenAI's default when a request omits ``store``)
keeps a Responses answer; ``previous_response_id`` continues from it; ``GET`` and
``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` read and remove
it.

One SQLite file in the state directory (``responses.sqlite3``), WAL mode, written from
the event loop (a row is a few KB: a write takes well under a millisecond). A response
keeps its whole body as returned, the input items it was answered from (those of the
responses it continued, then its own, each with an id) and its output items: continuing
from it replays input and output as the next request's first items, so the model sees
the conversation as it went (reasoning included, as its items carried it), while its
``instructions`` are not carried over, as on OpenAI. Responses older than
``--response-retention-s`` are deleted as new ones are written and are never read.

Owners: with ``--api-keys`` set, a response belongs to the key that made it (a digest of
it is stored, never the key) and another key gets a 404, as for a response that does
not exist; without keys, every client shares the store.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from core.errors import InvalidRequest, NotFound

FILE: Final = "responses.sqlite3"
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created REAL NOT NULL,
    body TEXT NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created);
"""


def owner_of(key: str | None) -> str:
    """The owner a request's API key stood for before responses belonged to tenants ("",
    without keys): rows stored then stay readable with that key until they expire."""
    return "" if not key else hashlib.sha256(key.encode()).hexdigest()[:32]


def tenant_owner(tenant: str) -> str:
    """The owner of a tenant's responses: every key of the tenant, and its batch lines,
    read what any of them stored (as OpenAI's responses belong to a project)."""
    return f"tenant:{tenant}"


def with_ids(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` with an id each (an input item's, as OpenAI lists them) and without the
    ``thinkgate`` details an output item carries."""
    out = []
    for item in items:
        clean = {k: v for k, v in item.items() if k != "thinkgate"}
        if "role" in clean:  # a message, in the form OpenAI lists it
            clean.setdefault("type", "message")
            if isinstance(clean.get("content"), str):
                part = "output_text" if clean["role"] == "assistant" else "input_text"
                clean["content"] = [{"type": part, "text": clean["content"]}]
        clean.setdefault("id", f"msg_{uuid.uuid4().hex[:24]}")
        out.append(clean)
    return out


class ResponseStore:
    def __init__(self, path: Path, *, retention_s: float) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self.retention_s = retention_s

    def close(self) -> None:
        self._db.close()

    def _cutoff(self) -> float:
        return time.time() - self.retention_s

    def put(
        self,
        response_id: str,
        owner: str,
        body: dict[str, Any],
        inputs: Sequence[dict[str, Any]],
        outputs: Sequence[dict[str, Any]],
    ) -> None:
        self._db.execute("DELETE FROM responses WHERE created < ?", (self._cutoff(),))
        self._db.execute(
            "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
            (
                response_id,
                owner,
                time.time(),
                json.dumps(body),
                json.dumps(list(inputs)),
                json.dumps(with_ids(outputs)),
            ),
        )

    def _row(self, response_id: str, owner: Owners, param: str) -> tuple[str, str, str]:
        row = self._db.execute(
            "SELECT body, input, output FROM responses WHERE id = ? AND owner IN (?, ?)"
            " AND created >= ?",
            (response_id, *_two(owner), self._cutoff()),
        ).fetchone()
        if row is None:
            message = f"no stored response {response_id!r} (another tenant's, expired or deleted)"
            if param == "previous_response_id":  # a bad request field, as OpenAI answers it
                raise InvalidRequest(message, param=param, code="previous_response_not_found")
            raise NotFound(message, param=param)
        return row[0], row[1], row[2]

    def body(self, response_id: str, owner: Owners) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self._row(response_id, owner, "response_id")[0])
        return body

    def inputs(self, response_id: str, owner: Owners) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = json.loads(self._row(response_id, owner, "response_id")[1])
        return items

    def conversation(self, response_id: str, owner: Owners) -> list[dict[str, Any]]:
        """What continuing from ``response_id`` starts with: its input, then its output."""
        _, inputs, outputs = self._row(response_id, owner, "previous_response_id")
        items: list[dict[str, Any]] = [*json.loads(inputs), *json.loads(outputs)]
        return items

    def item(self, item_id: str, owner: Owners, *, param: str) -> dict[str, Any]:
        """An input or output item of ``owner``'s stored responses, by its id (what an
        ``item_reference`` names: the AI SDK sends earlier turns so while store is on)."""
        query = (
            "SELECT j.value FROM responses r, json_each(r.{col}) j WHERE r.owner IN (?, ?)"
            " AND r.created >= ? AND json_extract(j.value, '$.id') = ?"
        )
        args = (*_two(owner), self._cutoff(), item_id)
        for col in ("output", "input"):  # an answer's items first: most references are
            row = self._db.execute(query.format(col=col) + " LIMIT 1", args).fetchone()
            if row is not None:
                found: dict[str, Any] = json.loads(row[0])
                return found
        raise NotFound(
            f"{param}: no stored item {item_id!r} (another tenant's, expired or deleted)",
            param=param,
        )

    def delete(self, response_id: str, owner: Owners) -> None:
        self._row(response_id, owner, "response_id")
        self._db.execute(
            "DELETE FROM responses WHERE id = ? AND owner IN (?, ?)", (response_id, *_two(owner))
        )


# Who may read a row: one owner, or (new, legacy) while rows of the legacy one remain.
Owners = str | tuple[str, str]


def _two(owner: Owners) -> tuple[str, str]:
    return (owner, owner) if isinstance(owner, str) else owner
