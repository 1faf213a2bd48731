"""``thinkgate calibrate auto`` without a server: its questions file (read, malformed
lines named by number), the testbed's shipped questions, how a question is asked, and
the table ``main`` writes from what was measured."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from server.calibrate import auto
from server.calibrate.plans import FixedPlan, ask
from server.calibrate.questions import Question, QuestionsFileError, read_questions
from strategies.auto import AutoTable
from testbed.defaults import CALIBRATION_COUNT, CALIBRATION_QUESTIONS
from testbed.task import make_questions


def _file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_a_questions_file_gives_prompts_or_chats_with_their_answers(tmp_path: Path) -> None:
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
    path = _file(
        tmp_path,
        json.dumps({"prompt": "Compute 2+3 mod 10.", "answer": "5"}),
        "",
        json.dumps({"messages": chat, "answer": 2}),
        json.dumps({"prompt": "third", "answer": "3"}),
    )
    got = read_questions(path)
    assert got[0] == Question.of_prompt("Compute 2+3 mod 10.", "5")
    assert got[1].answer == "2" and got[1].chat() == chat and got[1].prompt == "1+1?"
    assert read_questions(path, 2) == got[:2]
    with pytest.raises(QuestionsFileError, match="4 questions asked for, the file has 3"):
        read_questions(path, 4)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("{not json", "not JSON"),
        (json.dumps({"prompt": "p"}), "needs an 'answer'"),
        (json.dumps({"prompt": "p", "answer": True}), "needs an 'answer'"),
        (json.dumps({"answer": "1"}), "needs 'prompt'"),
        (json.dumps({"messages": [{"role": "user"}], "answer": "1"}), "'messages' is a list"),
        (json.dumps(["prompt", "answer"]), "a JSON object"),
    ],
)
def test_a_malformed_line_is_named_by_its_number(tmp_path: Path, bad: str, why: str) -> None:
    good = json.dumps({"prompt": "p", "answer": "1"})
    path = _file(tmp_path, good, "", bad, good)
    with pytest.raises(QuestionsFileError, match=rf"q\.jsonl:3: .*{why}"):
        read_questions(path)


def test_the_testbed_ships_the_questions_the_auto_table_was_calibrated_on() -> None:
    lines = CALIBRATION_QUESTIONS.read_text().splitlines()
    qs = make_questions("validation", CALIBRATION_COUNT, seed=0, min_ops=8, max_ops=12)
    assert [json.loads(line) for line in lines] == [
        {"prompt": q.prompt, "answer": str(q.answer)} for q in qs
    ]
    # `--questions N` takes the first N: what calibration drew for N (24 by default).
    first = make_questions("validation", 24, seed=0, min_ops=8, max_ops=12)
    assert read_questions(CALIBRATION_QUESTIONS, 24) == [
        Question.of_prompt(q.prompt, str(q.answer)) for q in first
    ]


class _Client:
    """An OpenAI client's chat completions, answering ``reply`` and keeping the request."""

    def __init__(self, reply: str) -> None:
        self.sent: dict[str, Any] = {}
        self.reply = reply
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    async def _create(self, **kwargs: Any) -> Any:
        self.sent = kwargs
        choice = SimpleNamespace(
            model_extra={}, message=SimpleNamespace(content=f"\\boxed{{{self.reply}}}")
        )
        return SimpleNamespace(choices=[choice], usage=SimpleNamespace(completion_tokens=7))


def test_a_question_is_asked_as_its_chat_under_the_plans_budget() -> None:
    client = _Client("5")
    q = Question((("system", "s"), ("user", "Compute 2+3 mod 10.")), "5")
    plan = FixedPlan("self-consistency", 4, 128)
    out = asyncio.run(ask(client, "m", q, plan, {"deadline_ms": 500}, seed=3))
    assert out.right and out.answered and out.tokens == 7
    assert client.sent["messages"] == q.chat() and client.sent["seed"] == 3
    assert client.sent["extra_headers"] == {"X-Strategy": "self-consistency"}
    assert client.sent["extra_body"] == {
        "budget": {"thinking": 128, "samples": 4, "deadline_ms": 500}
    }
    wrong = asyncio.run(ask(_Client("6"), "m", q, None, {}, seed=0))
    assert wrong.answered and not wrong.right


def test_main_writes_the_table_from_the_first_questions_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    async def fake_measure(
        url: str, parts: Any, questions: Any, seed: int, deadlines: Any
    ) -> tuple[str, list[dict[str, Any]]]:
        seen.update(url=url, parts=parts, questions=questions, seed=seed, deadlines=deadlines)
        row = {"strategy": "plain", "samples": 1, "thinking": None, "accuracy": 0.5}
        return "served", [{**row, "tokens": 9.0, "seconds": 0.3, "questions": len(questions)}]

    monkeypatch.setattr(auto, "measure", fake_measure)
    out = tmp_path / "table.json"
    argv = ["--server", "http://h", "--questions-file", str(CALIBRATION_QUESTIONS)]
    argv += ["--questions", "3", "--parts", "ceilings", "--seed", "2", "--out", str(out)]
    assert auto.main(argv) == 0
    assert seen["url"] == "http://h" and seen["parts"] == ["ceilings"] and seen["seed"] == 2
    assert seen["questions"] == read_questions(CALIBRATION_QUESTIONS, 3)
    table = AutoTable.load(out)
    assert table.model == "served" and table.questions == 3 and len(table.rows) == 1
    record = json.loads(out.read_text())["calibration"]
    assert record["questions_file"] == CALIBRATION_QUESTIONS.name and record["seed"] == 2


def test_main_names_a_malformed_questions_file_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, json.dumps({"prompt": "p"}))
    with pytest.raises(SystemExit) as stopped:
        auto.main(["--server", "http://h", "--questions-file", str(path), "--questions", "1"])
    assert stopped.value.code == 2
    assert "q.jsonl:1: a question needs an 'answer'" in capsys.readouterr().err


def test_without_a_questions_file_the_installed_defaults_offer_theirs() -> None:
    import argparse

    got_path, got = auto._questions(argparse.ArgumentParser(), None, 24)
    assert got_path == CALIBRATION_QUESTIONS and len(got) == 24
