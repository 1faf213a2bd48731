"""The fit's journal: every outcome as it arrives, one JSON line each, so a run that was
killed resumes where it stopped (``thinkgate fit`` run again with the same ``--out``).

A line is ``{"cell": key, "q": question id, ...outcome}``; a line cut short by the kill
is skipped on reading. The schedule the run chose is kept beside it (``schedule.json``)
so the resumed run measures the same cells on the same questions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from server.calibrate.plans import Outcome

JOURNAL_FILE = "journal.jsonl"
SCHEDULE_FILE = "schedule.json"


class Journal:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / JOURNAL_FILE
        self.done: dict[tuple[str, str], Outcome] = dict(self._read())
        self._out: TextIO = self.path.open("a")

    def _read(self) -> Iterator[tuple[tuple[str, str], Outcome]]:
        if not self.path.exists():
            return
        for line in self.path.read_text().splitlines():
            try:
                doc = json.loads(line)
                key = (str(doc.pop("cell")), str(doc.pop("q")))
                yield key, Outcome(**doc)
            except (ValueError, KeyError, TypeError):
                continue  # the line the kill cut short

    def has(self, cell: str, question: str) -> bool:
        return (cell, question) in self.done

    def add(self, cell: str, question: str, outcome: Outcome) -> None:
        self.done[(cell, question)] = outcome
        self._out.write(json.dumps({"cell": cell, "q": question, **asdict(outcome)}) + "\n")
        self._out.flush()

    def of(self, cell: str, questions: list[str]) -> list[Outcome]:
        """The outcomes of ``cell`` on ``questions`` that are in, in that order."""
        return [self.done[(cell, q)] for q in questions if (cell, q) in self.done]

    def close(self) -> None:
        self._out.close()


def saved_schedule(directory: Path) -> dict[str, Any] | None:
    path = directory / SCHEDULE_FILE
    if not path.exists():
        return None
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def save_schedule(directory: Path, doc: dict[str, Any]) -> None:
    (directory / SCHEDULE_FILE).write_text(json.dumps(doc, indent=1) + "\n")
