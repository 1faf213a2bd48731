"""A workload file: the questions ``thinkgate fit`` fits the planners to.

JSONL, one question a line: ``messages`` (a chat, each message a ``role`` and a string
``content``) or ``prompt`` (one user message); optionally ``answer`` (a string or a
number) and ``grader`` (``server.calibrate.graders``; the file's default otherwise).
``Fields`` maps other names so common data sets load as they are: GSM8K is
``Fields(prompt="question", answer_after="####", grader=Grader("number"))``; a
multiple-choice set with a list of options is ``Fields(choices="choices",
grader=Grader("choice"))`` (the options are appended as ``A. ...`` lines, an integer
answer becomes its letter).

A workload without any answer is label-free: a large vote's consensus stands in for the
answer (``server.calibrate.fit``), and reports say "agreement with consensus". Answers on
some lines only is an error: a mixed file would judge two things under one name.

Each question's id is a hash of its messages (``question_id``), so it names the question
whatever line it is on; a question repeated in the file is kept once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from server.calibrate.graders import Grader, GraderError

_LETTERS = "ABCDEFGHIJ"


class WorkloadError(ValueError):
    """A workload file that cannot be read as questions; the message names the line."""


@dataclass(frozen=True, slots=True)
class Fields:
    """Where a line keeps what a question needs, and how its answer is written."""

    prompt: str = "prompt"
    messages: str = "messages"
    answer: str = "answer"
    grader_field: str = "grader"
    answer_after: str | None = None  # the answer is the text after the last marker
    choices: str | None = None  # a list of options, appended to the prompt as letters
    grader: Grader = field(default_factory=Grader)  # a line without its own


@dataclass(frozen=True, slots=True)
class WorkQuestion:
    id: str
    messages: tuple[tuple[str, str], ...]
    answer: str | None
    grader: Grader
    line: int = 0

    @property
    def prompt(self) -> str:
        return next((c for role, c in reversed(self.messages) if role == "user"), "")

    def chat(self) -> list[dict[str, str]]:
        return [{"role": role, "content": content} for role, content in self.messages]


@dataclass(frozen=True, slots=True)
class Workload:
    path: Path
    sha256: str  # of the file's bytes
    questions: tuple[WorkQuestion, ...]
    repeated: int = 0  # lines that repeated an earlier question (kept once)

    @property
    def label_free(self) -> bool:
        return all(q.answer is None for q in self.questions)


def question_id(messages: tuple[tuple[str, str], ...]) -> str:
    """A stable name of a question: the first 16 hex digits of the SHA-256 of its
    messages as canonical JSON."""
    canonical = json.dumps([list(m) for m in messages], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def read_workload(path: Path, fields: Fields | None = None) -> Workload:
    """The questions of ``path``; a malformed line is a ``WorkloadError`` naming it."""
    f = fields or Fields()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the workload ({exc})") from exc
    out: dict[str, WorkQuestion] = {}
    repeated = 0
    for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        q = _question(line, f, f"{path}:{number}", number)
        if q.id in out:
            repeated += 1
            continue
        out[q.id] = q
    if not out:
        raise WorkloadError(f"{path}: no questions")
    labelled = [q for q in out.values() if q.answer is not None]
    if labelled and len(labelled) < len(out):
        first = next(q for q in out.values() if q.answer is None)
        raise WorkloadError(
            f"{path}:{first.line}: no '{f.answer}', while other lines have one (give every "
            "question its answer, or none: a label-free workload)"
        )
    return Workload(path, hashlib.sha256(raw).hexdigest(), tuple(out.values()), repeated)


def _question(line: str, f: Fields, where: str, number: int) -> WorkQuestion:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}: not JSON ({exc.msg})") from exc
    if not isinstance(doc, dict):
        raise WorkloadError(f"{where}: a question is a JSON object")
    messages = _messages(doc, f, where)
    options = _choices(doc, f, where)
    if options:
        role, text = messages[-1]
        listed = "\n".join(f"{_LETTERS[i]}. {o}" for i, o in enumerate(options))
        messages = (*messages[:-1], (role, f"{text}\n\n{listed}"))
    try:
        grader = Grader.parse(doc[f.grader_field]) if f.grader_field in doc else f.grader
    except GraderError as exc:
        raise WorkloadError(f"{where}: {exc}") from exc
    answer = _answer(doc.get(f.answer), f, where, len(options))
    return WorkQuestion(question_id(messages), messages, answer, grader, number)


def chat_of(raw: object) -> tuple[tuple[str, str], ...] | None:
    """A chat as ``(role, content)`` pairs: a non-empty list of ``{role, content}``
    strings (None: ``raw`` is not one)."""
    if not isinstance(raw, list) or not raw:
        return None
    out: list[tuple[str, str]] = []
    for m in raw:
        role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (0, 0)
        if not isinstance(role, str) or not isinstance(content, str):
            return None
        out.append((role, content))
    return tuple(out)


def _messages(doc: dict[str, object], f: Fields, where: str) -> tuple[tuple[str, str], ...]:
    if f.messages in doc:
        chat = chat_of(doc[f.messages])
        if chat is None:
            raise WorkloadError(f"{where}: '{f.messages}' is a list of {{role, content}} strings")
        return chat
    prompt = doc.get(f.prompt)
    if not isinstance(prompt, str) or not prompt.strip():
        raise WorkloadError(f"{where}: a question needs '{f.prompt}' (a string) or '{f.messages}'")
    return (("user", prompt),)


def _choices(doc: dict[str, object], f: Fields, where: str) -> list[str]:
    if f.choices is None:
        return []
    raw = doc.get(f.choices)
    if not isinstance(raw, list) or not 2 <= len(raw) <= len(_LETTERS):
        raise WorkloadError(f"{where}: '{f.choices}' is a list of 2-{len(_LETTERS)} options")
    return [str(o) for o in raw]


def _answer(raw: object, f: Fields, where: str, options: int) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise WorkloadError(f"{where}: '{f.answer}' is a string or a number")
    if options and isinstance(raw, int):
        if not 0 <= raw < options:
            raise WorkloadError(f"{where}: answer index {raw} is not one of the {options} options")
        return _LETTERS[raw]
    text = str(raw)
    if f.answer_after is not None:
        if f.answer_after not in text:
            raise WorkloadError(f"{where}: the answer has no {f.answer_after!r} before it")
        text = text.rsplit(f.answer_after, 1)[1]
    text = text.strip()
    if not text:
        raise WorkloadError(f"{where}: the answer is empty")
    return text
