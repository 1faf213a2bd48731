"""Stored responses: ``store: true`` (OpenAI's default when a request omits ``store``)
keeps a Responses answer; ``previous_response_id`` continues from it; ``GET`` and
``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items`` read and remove
it.

On the SQL layer the batches use (``core.sql``): a ``responses.sqlite3`` in the state
directory, or the PostgreSQL that ``--batch-store`` names, shared by a fleet's gateways
(a response stored through one is continued, read and deleted through any). Calls run on
the event loop (a row is a few KB: a local write takes well under a millisecond; keep a
PostgreSQL near the gateways). A response keeps its whole body as returned, the input
items it was answered from (those of the responses it continued, then its own, each with
an id) and its output items, each item also indexed by its id (``item_reference``):
continuing from it replays input and output as the next request's first items, so the
model sees the conversation as it went (reasoning included, as its items carried it),
while its ``instructions`` are not carried over, as on OpenAI. Responses older than
``--response-retention-s`` are deleted as new ones are written and are never read.

Owners: with ``--api-keys`` set, a response belongs to the key that made it (a digest of
it is stored, never the key) and another key gets a 404, as for a response that does
not exist; without keys, every client shares the store.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any, Final

from core.errors import InvalidRequest, NotFound
from core.sql import Connection, Cursor

FILE: Final = "responses.sqlite3"
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    body TEXT NOT NULL,
    input TEXT NOT NULL,
    output TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created);
CREATE TABLE IF NOT EXISTS response_items (
    item_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL,
    side INTEGER NOT NULL,
    value TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS response_items_id ON response_items (item_id);
CREATE INDEX IF NOT EXISTS response_items_response ON response_items (response_id)
"""
_OUTPUT, _INPUT = 0, 1  # an item's side: a reference finds an answer's items first


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
    def __init__(self, target: str, *, retention_s: float) -> None:
        """``target``: a SQLite file, or a ``postgresql://`` URL."""
        self._db = Connection(target, thread_name="thinkgate-responses")
        try:
            self._db.schema(_SCHEMA)
            self._index_old_rows()
        except BaseException:
            self._db.close_now()
            raise
        self.retention_s = retention_s
        self.target = self._db.target

    def close(self) -> None:
        self._db.close_now()

    def _cutoff(self) -> float:
        return time.time() - self.retention_s

    def _index_old_rows(self) -> None:
        """Responses stored before items were indexed get their items indexed once."""
        read = self._db.read()
        if read.one("SELECT 1 FROM response_items LIMIT 1") is not None:
            return
        rows = read.all("SELECT id, owner, created, input, output FROM responses")
        if rows:
            with self._db.write() as db:
                for rid, owner, created, inputs, outputs in rows:
                    _index(db, rid, owner, created, json.loads(inputs), json.loads(outputs))

    def put(
        self,
        response_id: str,
        owner: str,
        body: dict[str, Any],
        inputs: Sequence[dict[str, Any]],
        outputs: Sequence[dict[str, Any]],
    ) -> None:
        now, cutoff = time.time(), self._cutoff()
        items = with_ids(outputs)
        with self._db.write() as db:
            db.run("DELETE FROM responses WHERE created < ?", (cutoff,))
            db.run("DELETE FROM response_items WHERE created < ?", (cutoff,))
            db.run("DELETE FROM responses WHERE id = ?", (response_id,))
            db.run("DELETE FROM response_items WHERE response_id = ?", (response_id,))
            db.run(
                "INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                (
                    response_id,
                    owner,
                    now,
                    json.dumps(body),
                    json.dumps(list(inputs)),
                    json.dumps(items),
                ),
            )
            _index(db, response_id, owner, now, inputs, items)

    def _row(self, response_id: str, owner: Owners, param: str) -> tuple[str, str, str]:
        row = self._db.read().one(
            "SELECT body, input, output FROM responses WHERE id = ? AND owner IN (?, ?)"
            " AND created >= ?",
            (response_id, *_two(owner), self._cutoff()),
        )
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
        row = self._db.read().one(
            "SELECT value FROM response_items WHERE item_id = ? AND owner IN (?, ?)"
            " AND created >= ? ORDER BY side, created DESC LIMIT 1",
            (item_id, *_two(owner), self._cutoff()),
        )
        if row is None:
            raise NotFound(
                f"{param}: no stored item {item_id!r} (another tenant's, expired or deleted)",
                param=param,
            )
        found: dict[str, Any] = json.loads(row[0])
        return found

    def delete(self, response_id: str, owner: Owners) -> None:
        self._row(response_id, owner, "response_id")
        with self._db.write() as db:
            db.run(
                "DELETE FROM responses WHERE id = ? AND owner IN (?, ?)",
                (response_id, *_two(owner)),
            )
            db.run("DELETE FROM response_items WHERE response_id = ?", (response_id,))


def _index(
    db: Cursor,
    response_id: str,
    owner: str,
    created: float,
    inputs: Sequence[dict[str, Any]],
    outputs: Sequence[dict[str, Any]],
) -> None:
    rows = [
        (item["id"], response_id, owner, created, side, json.dumps(item))
        for side, items in ((_OUTPUT, outputs), (_INPUT, inputs))
        for item in items
        if isinstance(item.get("id"), str)
    ]
    if rows:
        db.many("INSERT INTO response_items VALUES (?, ?, ?, ?, ?, ?)", rows)


# Who may read a row: one owner, or (new, legacy) while rows of the legacy one remain.
Owners = str | tuple[str, str]


def _two(owner: Owners) -> tuple[str, str]:
    return (owner, owner) if isinstance(owner, str) else owner
