"""``thinkgate fit`` without vLLM: the workload file (every grader, field mapping,
label-free, each malformed line named), the split (stable, never overlapping), a fit on a
scripted engine that writes a profile ``auto`` then plans from, a killed fit that resumes
from its journal, and a profile refused in front of another model."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.calibrate import fit, fit_pets
from server.calibrate.fit_journal import JOURNAL_FILE
from server.calibrate.fit_profile import write
from server.calibrate.graders import Grader, GraderError
from server.calibrate.split import in_test, split
from server.calibrate.workload import Fields, WorkloadError, question_id, read_workload
from strategies.profile import Profile, ProfileError


def _file(tmp_path: Path, *docs: object, name: str = "w.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((d if isinstance(d, str) else json.dumps(d)) + "\n" for d in docs))
    return path


# --- the workload file


def test_prompts_chats_and_answers_load_with_their_graders(tmp_path: Path) -> None:
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
    path = _file(
        tmp_path,
        {"prompt": "2+3?", "answer": 5},
        "",
        {"messages": chat, "answer": "2", "grader": "number"},
        {"prompt": "Which?", "answer": "b", "grader": {"regex": r"pick (\w)"}},
        {"prompt": "2+3?", "answer": 5},  # the same question again: kept once
    )
    w = read_workload(path)
    assert [q.answer for q in w.questions] == ["5", "2", "b"]
    assert w.questions[1].chat() == chat and w.questions[1].prompt == "1+1?"
    assert [q.grader.kind for q in w.questions] == ["math", "number", "regex"]
    assert w.repeated == 1 and not w.label_free
    assert w.questions[0].id == question_id((("user", "2+3?"),))


@pytest.mark.parametrize(
    ("grader", "reply", "stated", "expected", "right"),
    [
        (Grader("math"), "so \\boxed{\\frac{1}{2}}", None, "0.5", True),
        (Grader("math"), "x", "1/2", "0.5", True),
        (Grader("math"), "\\boxed{3}", None, "4", False),
        (Grader("number"), "It costs 1,000.0 dollars", None, "1000", True),
        (Grader("number"), "#### 72", None, "72", True),
        (Grader("number"), "no number", None, "7", False),
        (Grader("choice"), "The answer is (c).", None, "C", True),  # as the vote reads it
        (Grader("choice"), "The answer is (C).", None, "C", True),
        (Grader("choice"), "Answer: B", None, "D", False),
        (Grader("exact"), "  Paris \n", None, "Paris", True),
        (Grader("exact"), "paris", None, "Paris", False),
        (Grader("regex", r"pick (\w+)"), "I pick red, not blue", None, "red", True),
        (Grader("regex", r"pick (\w+)"), "none", None, "red", False),
    ],
)
def test_each_grader_reads_and_compares(
    grader: Grader, reply: str, stated: str | None, expected: str, right: bool
) -> None:
    read = grader.read(reply, stated)
    assert (read is not None and grader.same(read, expected)) is right


def test_a_grader_that_is_not_one_is_refused() -> None:
    for bad in ("fuzzy", {"regex": "("}, {"regex": 1}, {"regex": "a", "x": 1}, 3):
        with pytest.raises(GraderError):
            Grader.parse(bad)


def test_common_data_sets_load_as_they_are(tmp_path: Path) -> None:
    gsm8k = _file(
        tmp_path,
        {"question": "Tom has 70 and finds 2.", "answer": "70 + 2 = 72\n#### 72"},
        name="gsm8k.jsonl",
    )
    w = read_workload(
        gsm8k, Fields(prompt="question", answer_after="####", grader=Grader("number"))
    )
    assert w.questions[0].answer == "72" and w.questions[0].prompt.startswith("Tom")
    mc = _file(
        tmp_path, {"q": "Capital of France?", "choices": ["Rome", "Paris"], "a": 1}, name="mc.jsonl"
    )
    got = read_workload(mc, Fields(prompt="q", answer="a", choices="choices")).questions[0]
    assert got.answer == "B" and got.prompt.endswith("A. Rome\nB. Paris")


def test_a_workload_without_answers_is_label_free(tmp_path: Path) -> None:
    w = read_workload(_file(tmp_path, {"prompt": "a?"}, {"prompt": "b?"}))
    assert w.label_free and all(q.answer is None for q in w.questions)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("{not json", "not JSON"),
        (["prompt"], "a JSON object"),
        ({"answer": "1"}, "needs 'prompt'"),
        ({"prompt": "  ", "answer": "1"}, "needs 'prompt'"),
        ({"messages": [{"role": "user"}], "answer": "1"}, "'messages' is a list"),
        ({"messages": [], "answer": "1"}, "'messages' is a list"),
        ({"prompt": "p", "answer": True}, "a string or a number"),
        ({"prompt": "p", "answer": ""}, "the answer is empty"),
        ({"prompt": "p", "answer": "1", "grader": "fuzzy"}, "grader is one of"),
        ({"prompt": "p"}, "no 'answer', while other lines have one"),
    ],
)
def test_a_malformed_line_is_named_by_its_number(tmp_path: Path, bad: object, why: str) -> None:
    path = _file(tmp_path, {"prompt": "x", "answer": "1"}, "", bad, {"prompt": "y", "answer": "2"})
    with pytest.raises(WorkloadError, match=rf"w\.jsonl:3: .*{re.escape(why)}"):
        read_workload(path)


def test_mapping_errors_name_the_line(tmp_path: Path) -> None:
    gsm = _file(tmp_path, {"question": "q", "answer": "72"})
    with pytest.raises(WorkloadError, match=r"w\.jsonl:1: the answer has no '####'"):
        read_workload(gsm, Fields(prompt="question", answer_after="####"))
    mc = _file(tmp_path, {"prompt": "q", "choices": ["a", "b"], "answer": 5}, name="mc.jsonl")
    with pytest.raises(WorkloadError, match=r"mc\.jsonl:1: answer index 5"):
        read_workload(mc, Fields(choices="choices"))
    with pytest.raises(WorkloadError, match="no questions"):
        read_workload(_file(tmp_path, "", name="empty.jsonl"))


# --- the split


def test_the_split_is_stable_and_never_overlaps(tmp_path: Path) -> None:
    docs = [{"prompt": f"What is {i}+1?", "answer": i + 1} for i in range(400)]
    w = read_workload(_file(tmp_path, *docs))
    fit_part, test_part = split(w.questions, 0.5)
    fit_ids, test_ids = {q.id for q in fit_part}, {q.id for q in test_part}
    assert not fit_ids & test_ids and len(fit_ids | test_ids) == 400
    assert 150 < len(test_ids) < 250  # a hash, about half
    # Another order, more questions: no question changes side.
    more = read_workload(
        _file(tmp_path, *reversed(docs), {"prompt": "new?", "answer": 0}, name="more.jsonl")
    )
    fit2, test2 = split([q for q in more.questions if q.prompt != "new?"], 0.5)
    assert {q.id for q in test2} == test_ids and {q.id for q in fit2} == fit_ids
    assert all(in_test(i, 0.5) for i in test_ids)
    with pytest.raises(ValueError, match="between 0 and 1"):
        split(w.questions, 1.0)


# --- a fit on a scripted engine


def _sums(n: int) -> list[dict[str, object]]:
    return [{"prompt": f"What is {i}+{i * 3 % 7}?", "answer": i + i * 3 % 7} for i in range(n)]


def _handler(tokens: Any, calls: list[GenerateRequest]) -> Callable[..., Sequence[Sample]]:
    """Right on every question whose first term is even, wrong on the others."""

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        calls.append(request)
        a, b = map(
            int, re.findall(r"What is (\d+)\+(\d+)", tokens.decode(request.prompt_token_ids))[-1]
        )
        said = a + b if a % 2 == 0 else a + b + 1
        return samples_of(
            tokens, *[f"{a}+{b}={said}\n</think>\\boxed{{{said}}}"] * request.sampling.n
        )

    return handler


def _args(tmp_path: Path, workload: Path, *more: str) -> argparse.Namespace:
    return fit.parser().parse_args(
        [
            "--workload",
            str(workload),
            "--out",
            str(tmp_path / "prof"),
            "--minutes",
            "5",
            "--min-questions",
            "6",
            "--deadlines",
            "1",
            "--clients",
            "1,2",
            *more,
        ]
    )


async def test_a_fit_writes_a_profile_that_auto_plans_from(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    path = _file(tmp_path, *_sums(24))
    args = _args(tmp_path, path)
    w = read_workload(path)
    calls: list[GenerateRequest] = []
    async with scripted_app(_handler(testbed_tokens, calls)) as app:
        fitted = await fit.fitting(app.openai(), args, w)
    write(args.out, fitted)
    doc = json.loads((args.out / "profile.json").read_text())
    assert set(doc["split"]["fit_ids"]).isdisjoint(doc["split"]["test_ids"])
    assert len(doc["split"]["fit_ids"]) + len(doc["split"]["test_ids"]) == 24
    # Without a PRM the step searches are refused, and left out of the table.
    assert {"step-rejection", "particle-filtering"} <= set(fitted.refused)
    table = json.loads((args.out / "auto-table.json").read_text())
    strategies = {r["strategy"] for r in table["rows"]}
    assert "plain" in strategies and not strategies & set(fitted.refused)
    assert {r.get("clients", 1) for r in table["rows"] if "deadline_s" in r} == {1, 2}
    fit_qs = [q for q in w.questions if q.id in set(doc["split"]["fit_ids"])]
    expected = sum(
        1 for q in fit_qs[: fitted.questions] if int(q.prompt.split()[2].split("+")[0]) % 2 == 0
    )
    plain = next(r for r in table["rows"] if r["strategy"] == "plain")
    assert plain["accuracy"] == round(expected / fitted.questions, 4)
    assert (
        plain["low"] <= plain["accuracy"] <= plain["high"]
        and plain["questions"] == fitted.questions
    )
    assert "accuracy" in (args.out / "report.md").read_text()
    # The profile in front of the same model: auto plans from its table, and says so.
    async with scripted_app(_handler(testbed_tokens, calls), profile=str(args.out)) as app:
        card = (await app.client.get("/v1/models")).json()["data"][0]
        assert card["profile"]["name"] == "prof"
        r = await app.client.post(
            "/v1/chat/completions",
            headers={"X-Strategy": "auto", "X-Budget-Deadline-Ms": "1000"},
            json={"model": app.model, "messages": [{"role": "user", "content": "What is 2+2?"}]},
        )
    body = r.json()
    info = body["thinkgate"]["auto"]
    assert info["source"] == "table" and info["profile"] == "prof" and "@1s" in info["row"]


async def test_a_killed_fit_resumes_where_it_stopped(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    path = _file(tmp_path, *_sums(20))
    args = _args(tmp_path, path)
    w = read_workload(path)
    first: list[GenerateRequest] = []
    async with scripted_app(_handler(testbed_tokens, first)) as app:
        whole = await fit.fitting(app.openai(), args, w)
    journal = args.out / JOURNAL_FILE
    lines = journal.read_text().splitlines()
    # Killed: the last 10 outcomes never written, the one before cut mid-line.
    journal.write_text("\n".join(lines[:-11]) + "\n" + lines[-11][:20])
    again: list[GenerateRequest] = []
    async with scripted_app(_handler(testbed_tokens, again)) as app:
        resumed = await fit.fitting(app.openai(), args, w)
    assert 0 < len(again) < len(first) / 3  # only what was lost is asked again

    def timeless(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert timeless(resumed.rows) == timeless(whole.rows)  # the seconds re-measured
    assert resumed.questions == whole.questions
    other = _file(tmp_path, *_sums(21), name="other.jsonl")
    async with scripted_app(_handler(testbed_tokens, again)) as app:
        with pytest.raises(fit.FitError, match="another workload"):
            await fit.fitting(app.openai(), _args(tmp_path, other), read_workload(other))


async def test_a_profile_for_another_model_is_refused(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    path = _file(tmp_path, *_sums(16))
    args = _args(tmp_path, path, "--min-questions", "2")
    async with scripted_app(_handler(testbed_tokens, [])) as app:
        write(args.out, await fit.fitting(app.openai(), args, read_workload(path)))
    doc = json.loads((args.out / "profile.json").read_text())
    profile = Profile.load(args.out)
    profile.check(doc["model"], testbed_tokens)  # its own model: accepted
    with pytest.raises(ProfileError, match="fitted on 'testbed-base'"):
        profile.check("another", testbed_tokens)
    (args.out / "profile.json").write_text(json.dumps({**doc, "tokenizer": "0" * 16}))
    with pytest.raises(ProfileError, match="tokenizer"):
        async with scripted_app(_handler(testbed_tokens, []), profile=str(args.out)):
            pass
    (args.out / "profile.json").write_text("{}")
    with pytest.raises(ProfileError, match="not a thinkgate profile|format"):
        Profile.load(args.out)


async def test_the_judgment_runs_the_test_part_once_and_marks_a_second_look(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    from server.calibrate.judge import judging

    path = _file(tmp_path, *_sums(24))
    args = _args(tmp_path, path, "--limit", "6", "--ceilings", "1000")
    w = read_workload(path)
    async with scripted_app(_handler(testbed_tokens, [])) as app:
        write(args.out, await fit.fitting(app.openai(), args, w))
    async with scripted_app(_handler(testbed_tokens, []), profile=str(args.out)) as app:
        first = await judging(app.openai(), args, w)
        second = await judging(app.openai(), args, w)
    entries = json.loads((args.out / "judgments.json").read_text())
    assert [e["second_look"] for e in entries] == [False, True]
    assert "second look" not in first.splitlines()[0] and "second look" in second
    e = entries[0]
    test_ids = json.loads((args.out / "profile.json").read_text())["split"]["test_ids"]
    assert e["questions"] == 6 and len(test_ids) >= 6
    budgets = {c["budget"] for c in e["cells"]}
    assert budgets == {"1 s", "1000 tokens"}
    assert {v["budget"] for v in e["at_each_budget"]} == budgets
    # The scripted model is right on even first terms whatever the plan: auto ties.
    for c in e["cells"]:
        if c["auto_minus_plan"] is not None:
            assert c["auto_minus_plan"][0] == 0.0
    assert all(v["non_inferior"] for v in e["at_each_budget"])
    assert "## Judgment" in (args.out / "report.md").read_text()


def test_judge_without_a_profile_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, *_sums(4))
    argv = ["--workload", str(path), "--out", str(tmp_path / "none"), "--judge"]
    assert fit.main(argv) == 2
    assert "--judge needs a fitted profile in --out" in capsys.readouterr().err


class _NoThinkTags:
    """The testbed's tokenizer as a model without think tags sees it: its server refuses
    thinking budgets."""

    think_start_ids: tuple[int, ...] = ()
    think_end_ids: tuple[int, ...] = ()
    think_start_id = None
    think_end_id = None

    def __init__(self, tokens: Any) -> None:
        self._tokens = tokens

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokens, name)


async def test_a_model_without_think_tags_is_fitted_on_the_plans_it_runs(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    path = _file(tmp_path, *_sums(16))
    args = _args(tmp_path, path, "--min-questions", "2")
    plain = _NoThinkTags(testbed_tokens)
    async with scripted_app(_handler(testbed_tokens, []), tokens=plain) as app:
        fitted = await fit.fitting(app.openai(), args, read_workload(path))
    assert "elastic (thinking budget)" in fitted.refused
    assert "self-consistency (thinking budget)" in fitted.refused
    plans = {(r["strategy"], r["samples"], r["thinking"]) for r in fitted.rows}
    assert ("self-consistency", 4, None) in plans and ("plain", 1, None) in plans
    assert all(r["thinking"] is None for r in fitted.rows)


def test_ceilings_none_judges_at_the_deadlines_only(tmp_path: Path) -> None:
    path = _file(tmp_path, *_sums(4))
    assert _args(tmp_path, path, "--ceilings", "none").ceilings == ()
    assert _args(tmp_path, path, "--ceilings", "300").ceilings == (300,)
    with pytest.raises(SystemExit):
        _args(tmp_path, path, "--ceilings", "")


async def test_a_fit_draws_pets_pools_and_its_profile_brings_the_pets_table(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    from strategies.pets.online import TABLE_KEY
    from strategies.pets.table import PetsTable

    path = _file(tmp_path, *_sums(60))
    args = _args(tmp_path, path)
    calls: list[GenerateRequest] = []
    async with scripted_app(_handler(testbed_tokens, calls)) as app:
        fitted = await fit.fitting(app.openai(), args, read_workload(path))
        served = app.model
    write(args.out, fitted)
    assert fitted.pets.table == "pets-table.json" and fitted.pets.questions >= 12
    pools = (args.out / "pets-pools.jsonl").read_text().splitlines()
    assert len(pools) == fitted.pets.questions
    assert all(len(json.loads(line)["answers"]) == 32 for line in pools)
    fit_prompts = {q.prompt for q in read_workload(path).questions if q.id in fitted.split.fit_ids}
    assert {json.loads(line)["messages"][-1]["content"] for line in pools} <= fit_prompts
    table = PetsTable.load(args.out / "pets-table.json")
    assert table.calibration["model"] == served and table.average_budget == 16.0
    assert Profile.load(args.out).pets_table == args.out / "pets-table.json"
    # The stop rule replayed on the pools: every sample agrees, so the lowest confidence.
    stop = json.loads((args.out / "profile.json").read_text())["stop_rule"]
    assert stop["chosen_by"] == "fit" and stop["pools"] == fitted.pets.questions
    assert stop["confidence"] == 0.8 == Profile.load(args.out).table.stop_confidence
    assert "PETS table (`pets-table.json`)" in (args.out / "report.md").read_text()
    async with scripted_app(_handler(testbed_tokens, calls), profile=str(args.out)) as app:
        attached = app.asgi.state.gateway.resources.get(TABLE_KEY)
        assert attached is not None
        assert attached.calibration["source"] == table.calibration["source"]
    # Too little time for the pools: left out, and the report says why.
    short = await fit_pets.fit_table(
        None, [], model=served, seed=0, max_tokens=64, out=tmp_path / "none"
    )
    assert short.table is None and "12 needed" in (short.reason or "")


def test_the_predictor_is_trained_only_where_it_can_be_and_the_profile_says_why(
    tmp_path: Path,
) -> None:
    from server.calibrate import fit_predictor
    from testbed import model_path

    base = str(model_path("base"))
    assert fit_predictor.why_not(base, {}) is None
    assert "given by URL" in (fit_predictor.why_not(None, {}) or "")
    no_tags = {"budget-guidance (thinking budget)": "400", "elastic (thinking budget)": "400"}
    assert "think tags" in (fit_predictor.why_not(base, no_tags) or "")
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    assert "LlamaForCausalLM" in (fit_predictor.why_not(str(llama), {}) or "")
    out = tmp_path / "prof"
    out.mkdir()
    (out / "profile.json").write_text('{"name": "prof"}')
    (out / "report.md").write_text("# report\n")
    fit_predictor.record(out, fit_predictor.PredictorFit(False, "no think tags"))
    doc = json.loads((out / "profile.json").read_text())
    assert doc["predictor"] == {"dir": None, "left_out": "no think tags"}
    assert "Budget predictor: left out (no think tags)" in (out / "report.md").read_text()
