from __future__ import annotations

import random

from testbed.task import Question, make_questions
from testbed.tokenizer import THINK_END
from testbed.traces import (
    CONCISE,
    FULL,
    check_line,
    classify_line,
    count_lines,
    cut_trace,
    line_is_correct,
    make_trace,
    step_line,
)


def test_lines() -> None:
    assert step_line(3, "+", 8) == "3+8=1"
    assert check_line(1, "-", 5) == "check 6+5=1"
    assert classify_line("3+8=1") == "step"
    assert classify_line("check 6+5=1") == "check"
    assert classify_line("1-5+7=3") == "merged"
    assert classify_line("hello") == "other"
    assert line_is_correct("1-5+7=3")
    assert line_is_correct("check 6+5=1")
    assert not line_is_correct("1-5+7=4")
    assert not line_is_correct("1-5=")
    for junk in ("-3=4", "check -3=4", "3+=4", "33+1=4", "3+1=14", "", "check"):
        assert not line_is_correct(junk), junk
        assert classify_line(junk) == "other", junk
    assert classify_line("1+2+3+4=0") == "other"  # three operations in one line: not a format


def test_example_trace_shape() -> None:
    q = Question.from_expr("3+8-5+7")
    t = make_trace(q, random.Random(0), FULL)
    assert t.completion.startswith(t.thinking)
    assert t.completion.endswith(f"{THINK_END}\n\\boxed{{3}}")
    assert t.concluded is None  # this draw merges nothing wrongly
    assert all(line_is_correct(line) for line in t.thinking.splitlines())


def test_rates_match_style() -> None:
    rng = random.Random(1)
    totals = {"step": 0, "check": 0, "merged": 0, "other": 0}
    for q in make_questions("train", 400, seed=1):
        for k, v in count_lines(make_trace(q, rng, FULL).thinking).items():
            totals[k] += v
    assert totals["other"] == 0
    assert 0.55 < totals["check"] / totals["step"] < 0.65
    # A merge consumes two operations; lines that compute = steps + merged.
    assert 0.08 < totals["merged"] / (totals["step"] + totals["merged"]) < 0.2


def test_concise_has_no_checks_and_is_shorter() -> None:
    rng = random.Random(2)
    qs = make_questions("train", 200, seed=2, min_ops=12, max_ops=12)
    full = sum(len(make_trace(q, rng, FULL).thinking) for q in qs)
    concise = [make_trace(q, rng, CONCISE).thinking for q in qs]
    assert all(count_lines(c)["check"] == 0 for c in concise)
    assert sum(map(len, concise)) < 0.6 * full


def test_cut_trace_keeps_the_right_answer() -> None:
    rng = random.Random(3)
    q = Question.from_expr("1+2+3+4+5")
    t = make_trace(q, rng, FULL)
    for _ in range(20):
        c = cut_trace(t, rng)
        assert c.forced_close
        assert t.thinking.startswith(c.thinking)
        assert c.completion.endswith("\\boxed{5}")


def test_merged_lines_err_at_their_rate_and_the_trace_follows_them() -> None:
    from testbed.traces import MERGE_ERROR, THOROUGH, Trace

    rng = random.Random(4)
    merged = wrong = astray = 0
    for q in make_questions("train", 3000, seed=4, min_ops=2):
        t = make_trace(q, rng, FULL)
        lines = t.thinking.splitlines()
        kinds = [classify_line(line) for line in lines]
        # Step and check lines are always right; only merged lines may err.
        pairs = list(zip(lines, kinds, strict=True))
        assert all(line_is_correct(x) for x, k in pairs if k != "merged")
        bad = [x for x, k in pairs if k == "merged" and not line_is_correct(x)]
        merged += kinds.count("merged")
        wrong += len(bad)
        # The trace goes on from what it wrote: the next line starts at the written result,
        # and the answer is the last line's result, right or not.
        for i, line in enumerate(lines[:-1]):
            if classify_line(line) == "merged":
                assert lines[i + 1][0] == line[-1]
        last = lines[-1].removeprefix("check ")
        written = int(last.split("=")[1]) if not lines[-1].startswith("check") else int(last[0])
        assert t.answer == written
        assert t.completion.endswith(f"\\boxed{{{written}}}")
        if t.concluded is not None:
            astray += 1
            assert bad and t.concluded != q.answer
    assert merged > 1000
    assert abs(wrong / merged - MERGE_ERROR) < 0.03, wrong / merged
    assert astray > 0
    # Fully checked traces never merge, so they never err; a cut trace answers correctly.
    for q in make_questions("train", 200, seed=5):
        assert make_trace(q, rng, THOROUGH).concluded is None
    wrong_trace = Trace(question=Question.from_expr("1-5+7"), thinking="1-5+7=4\n", concluded=4)
    assert wrong_trace.answer_text.endswith("{4}")
    cut = cut_trace(wrong_trace, rng)
    assert cut.concluded is None and cut.answer == 3
