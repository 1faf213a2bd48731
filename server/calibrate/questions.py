"""Calibration questions and the JSONL file they are read from.

One question a line: ``prompt`` (one user message) or ``messages`` (a chat, each message
a ``role`` and a string ``content``), and ``answer`` (the expected answer, a string or a
number), compared with ``strategies.answers.equivalent``. Blank lines are skipped; any
other line that is not such a question is an error naming its line number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from server.calibrate.workload import chat_of


class QuestionsFileError(ValueError):
    """A calibration questions file that cannot be read as questions."""


@dataclass(frozen=True, slots=True)
class Question:
    """One calibration question: the chat to send (``(role, content)`` pairs) and the
    answer that scores its reply."""

    messages: tuple[tuple[str, str], ...]
    answer: str

    @classmethod
    def of_prompt(cls, prompt: str, answer: str) -> Question:
        return cls((("user", prompt),), answer)

    @property
    def prompt(self) -> str:
        """The last user message: the question itself."""
        return next((c for role, c in reversed(self.messages) if role == "user"), "")

    def chat(self) -> list[dict[str, str]]:
        """The messages as a chat completions request sends them."""
        return [{"role": role, "content": content} for role, content in self.messages]


def read_questions(path: Path, limit: int | None = None) -> list[Question]:
    """The questions of ``path`` (the first ``limit`` of them when given)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise QuestionsFileError(f"{path}: cannot read calibration questions ({exc})") from exc
    out: list[Question] = []
    for number, line in enumerate(text.splitlines(), 1):
        if limit is not None and len(out) >= limit:
            break
        if line.strip():
            out.append(_question(line, f"{path}:{number}"))
    if limit is not None and len(out) < limit:
        raise QuestionsFileError(f"{path}: {limit} questions asked for, the file has {len(out)}")
    return out


def _question(line: str, where: str) -> Question:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise QuestionsFileError(f"{where}: not JSON ({exc.msg})") from exc
    if not isinstance(doc, dict):
        raise QuestionsFileError(f"{where}: a question is a JSON object")
    answer = doc.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise QuestionsFileError(f"{where}: a question needs an 'answer' (a string or number)")
    if "messages" in doc:
        return Question(_messages(doc["messages"], where), str(answer))
    prompt = doc.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise QuestionsFileError(f"{where}: a question needs 'prompt' (a string) or 'messages'")
    return Question.of_prompt(prompt, str(answer))


def _messages(raw: object, where: str) -> tuple[tuple[str, str], ...]:
    chat = chat_of(raw)
    if chat is None:
        raise QuestionsFileError(f"{where}: 'messages' is a list of {{role, content}} strings")
    return chat
