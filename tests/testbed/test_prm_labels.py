"""The PRM's step labels (exact arithmetic) and how a trajectory is shown to it: no torch
training, no vLLM."""

from __future__ import annotations

import random

from testbed.engine import to_completion
from testbed.prm import (
    STEP_TAG,
    _cut,
    corrupt,
    corrupt_early_end,
    corrupt_operand,
    example,
    op_class,
)
from testbed.prm_labels import expected_ops, remaining_ops, step_labels
from testbed.task import Question, make_questions
from testbed.tokenizer import CharCodec, chat_prompt
from testbed.traces import FULL, THOROUGH, line_is_correct, make_trace

Q = Question.from_expr("3+8-5+7")  # running values 1, 6, 3


def labels(*lines: str) -> tuple[tuple[bool, ...], bool]:
    got = step_labels(Q, list(lines))
    return got.lines, got.complete


def test_a_right_trace_is_right_at_every_step_and_complete() -> None:
    assert labels("3+8=1", "check 1-8=3", "1-5=6", "6+7=3") == ((True,) * 4, True)
    assert labels("3+8=1", "1-5+7=3") == ((True, True), True)


def test_every_step_after_the_first_wrong_one_is_wrong() -> None:
    # A wrong merged line (the testbed's usual error): it and everything after it.
    assert labels("3+8=1", "1-5+7=4", "4+0=4") == ((True, False, False), False)
    # A later line that would be right from the wrong value stays wrong.
    assert labels("3+8=2", "2-5=7", "7+7=4") == ((False, False, False), False)


def test_a_step_must_consume_the_questions_next_operations() -> None:
    assert labels("3+8=1", "1-4=7") == ((True, False), False)  # wrong operand copied
    assert labels("3+8=1", "1+5=6") == ((True, False), False)  # wrong operator
    assert labels("3+8=1", "1+7=8") == ((True, False), False)  # an operation skipped
    assert labels("3+8=1", "1-5=6", "6+7=3", "3+1=4") == ((True,) * 3 + (False,), False)


def test_the_stated_value_decides_not_the_left_operand() -> None:
    # `4-5=6` states the true running value after `-5` (6): the trace carries on right.
    assert labels("3+8=1", "4-5=6", "6+7=3") == ((True, True, True), True)
    assert labels("3+8=1", "1-5=9") == ((True, False), False)


def test_a_check_is_true_arithmetic_undoing_the_last_computing_line() -> None:
    assert labels("3+8=1", "check 1-8=3") == ((True, True), False)
    assert labels("3+8=1", "check 1-8=4") == ((True, False), False)  # false arithmetic
    assert labels("3+8=1", "check 1+8=9") == ((True, False), False)  # not the inverse
    assert labels("3+8=1", "check 2-8=4") == ((True, False), False)  # not from its value
    assert labels("check 1-8=3", "3+8=1") == ((False, False), False)  # nothing to check
    # A merged line's check undoes its last operation: 3 - 7 = 6, the middle value.
    assert labels("3+8=1", "1-5+7=3", "check 3-7=6") == ((True, True, True), True)


def test_the_expected_operation_is_the_questions_whatever_the_line_wrote() -> None:
    # 3+8-5+7: a line ends with the question's operation at its own count of them.
    assert expected_ops(Q, ["3+8=1", "1-5=6", "6+7=3"]) == (("+", 8), ("-", 5), ("+", 7))
    # A skipped `-5` is still asked for `-5` (what the line should have taken); after the
    # first wrong line nothing is asked: the count of consumed operations is lost.
    assert expected_ops(Q, ["3+8=1", "1+7=8", "8+7=5"]) == (("+", 8), ("-", 5), None)
    # A merged line ends with its second operation; checks and other lines ask nothing.
    assert expected_ops(Q, ["3+8=1", "check 1-8=3", "1-5+7=3"]) == (("+", 8), None, ("+", 7))
    assert expected_ops(Q, ["hmm", "3+8=1"]) == (None, None)
    # More operations than the question has left: nothing to name.
    assert expected_ops(Q, ["3+8=1", "1-5=6", "6+7=3", "3+1=4"])[3] is None


def test_the_example_carries_one_expected_class_per_step_tag() -> None:
    codec = CharCodec()
    text = "3+8=1\n1+7=8\n</think>\n\\boxed{8}<|im_end|>"
    row = example(codec, to_completion(codec, Q, codec.encode(text)))
    assert len(row.expected) == len(row.positions) == 3  # two lines and the end tag
    assert row.expected == (op_class(("+", 8)), op_class(("-", 5)), -1)
    assert op_class(("+", 0)) == 0 and op_class(("-", 9)) == 19 and op_class(None) == -1


def test_the_operations_left_count_down_to_zero_at_a_complete_end() -> None:
    # 3+8-5+7 has three operations; a check consumes none, a merged line two.
    assert remaining_ops(Q, ["3+8=1", "1-5=6", "6+7=3"]) == ((2, 1, 0), 0)
    assert remaining_ops(Q, ["3+8=1", "check 1-8=3", "1-5+7=3"]) == ((2, 2, 0), 0)
    # Closed one short: every line right, one operation left at the end.
    assert remaining_ops(Q, ["3+8=1", "1-5=6"]) == ((2, 1), 1)
    # After the first wrong line (a skipped -5) nothing is asked, the end included.
    assert remaining_ops(Q, ["3+8=1", "1+7=8"]) == ((2, None), None)
    assert remaining_ops(Q, []) == ((), 3)


def test_the_example_carries_the_operations_left_at_each_tag_and_the_end() -> None:
    codec = CharCodec()
    done = "3+8=1\n1-5=6\n6+7=3\n</think>\n\\boxed{3}<|im_end|>"
    early = "3+8=1\n1-5=6\n</think>\n\\boxed{6}<|im_end|>"
    assert example(codec, to_completion(codec, Q, codec.encode(done))).remaining == (2, 1, 0, 0)
    row = example(codec, to_completion(codec, Q, codec.encode(early)))
    assert row.remaining == (2, 1, 1) and row.labels == (True, True, False)
    cut = _cut(row, random.Random(0))
    assert len(cut.remaining) == len(cut.positions) == len(cut.labels)


def test_other_and_empty_lines_are_wrong() -> None:
    assert labels("3+8=1", "hmm", "1-5=6") == ((True, False, False), False)
    assert labels("3+8=1", "", "1-5=6") == ((True, False, False), False)
    assert labels() == ((), False)


def test_generated_traces_are_labeled_by_their_own_errors() -> None:
    rng = random.Random(3)
    seen_wrong = 0
    for q in make_questions("train", 200, seed=1, min_ops=6, max_ops=12):
        trace = make_trace(q, rng, FULL)
        got = step_labels(q, trace.thinking.split(STEP_TAG)[:-1])
        assert got.complete == (trace.concluded is None)
        seen_wrong += not got.complete
        clean = make_trace(q, rng, THOROUGH)  # every step checked, none merged: all right
        assert all(step_labels(q, clean.thinking.split(STEP_TAG)[:-1]).lines)
    assert seen_wrong > 5


def test_the_example_puts_one_label_at_every_tag_after_the_prompt() -> None:
    codec = CharCodec()
    text = "3+8=1\n1-5+7=4\n</think>\n\\boxed{4}<|im_end|>"
    done = to_completion(codec, Q, codec.encode(text))
    ex = example(codec, done)
    prompt = codec.encode(chat_prompt(Q.prompt))
    tag = codec.encode(STEP_TAG)[0]
    assert list(ex.ids) == prompt + codec.encode(text.removesuffix("<|im_end|>"))
    assert [ex.ids[p] for p in ex.positions] == [tag] * 3
    assert ex.positions[0] == len(prompt) + len("3+8=1")
    assert ex.labels == (True, False, False) and ex.lines == 2  # the end tag: not reached
    # Thinking cut mid-line (no tag after it, no `</think>`): only the closed lines count.
    cut = example(codec, to_completion(codec, Q, codec.encode("3+8=1\n1-5")))
    assert cut.labels == (True,) and cut.lines == 1


def test_a_corrupted_copy_changes_one_result_digit_and_is_labeled_by_arithmetic() -> None:
    codec = CharCodec()
    text = "3+8=1\ncheck 1-8=3\n1-5+7=3\n</think>\n\\boxed{3}<|im_end|>"
    done = to_completion(codec, Q, codec.encode(text))
    rng = random.Random(0)
    for _ in range(20):
        copy = corrupt(codec, done, rng)
        assert copy is not None and copy.question == Q
        before, after = done.thinking.split("\n"), copy.thinking.split("\n")
        changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        assert len(changed) == 1
        k = changed[0]
        assert before[k][:-1] == after[k][:-1] and before[k][-1] != after[k][-1]
        assert copy.text.endswith("</think>\n\\boxed{3}<|im_end|>")
        labels = example(codec, copy).labels
        assert labels == (True,) * k + (False,) * (4 - k)  # three lines and the end tag
    assert corrupt(codec, to_completion(codec, Q, codec.encode("hmm")), rng) is None


def test_an_operand_copy_takes_a_wrong_operation_with_true_arithmetic() -> None:
    codec = CharCodec()
    text = "3+8=1\ncheck 1-8=3\n1-5+7=3\n</think>\n\\boxed{3}<|im_end|>"
    done = to_completion(codec, Q, codec.encode(text))
    rng = random.Random(0)
    skipped = 0
    for _ in range(40):
        copy = corrupt_operand(codec, done, rng)
        assert copy is not None and copy.question == Q
        before, after = done.thinking.split("\n"), copy.thinking.split("\n")
        changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        assert len(changed) == 1 and changed[0] in (0, 2)  # computing lines only
        k = changed[0]
        # The line's arithmetic stays true; only its last operation differs.
        assert line_is_correct(after[k]) and before[k][:-4] == after[k][:-4]
        assert before[k][-4:-2] != after[k][-4:-2]
        skipped += after[k][-4:-2] == {0: "-5", 2: None}.get(k)
        labels = example(codec, copy).labels
        assert labels == (True,) * k + (False,) * (4 - k)
    assert skipped > 0  # `3+8=1` sometimes skips to the question's next operation
    # Nothing right to change: no copy.
    wrong = to_completion(codec, Q, codec.encode("3+8=2\n</think>\n"))
    assert corrupt_operand(codec, wrong, rng) is None


def test_an_early_end_copy_keeps_every_line_right_and_its_end_tag_wrong() -> None:
    codec = CharCodec()
    text = "3+8=1\ncheck 1-8=3\n1-5=6\n6+7=3\n</think>\n\\boxed{3}<|im_end|>"
    done = to_completion(codec, Q, codec.encode(text))
    assert example(codec, done).labels == (True,) * 5  # four lines and the end tag
    seen = set()
    rng = random.Random(0)
    for _ in range(20):
        copy = corrupt_early_end(codec, done, rng)
        assert copy is not None
        seen.add(copy.thinking)
        row = example(codec, copy)
        assert row.labels == (True,) * row.lines + (False,)  # closed early: the end is wrong
    # One or two computing lines before the last (a check after a kept line goes too).
    assert seen == {"3+8=1\n", "3+8=1\ncheck 1-8=3\n1-5=6\n"}
    # Nothing to cut: one computing line, or a thinking that never closed.
    assert (
        corrupt_early_end(codec, to_completion(codec, Q, codec.encode("3+8=1\n</think>\n")), rng)
        is None
    )
    assert (
        corrupt_early_end(codec, to_completion(codec, Q, codec.encode("3+8=1\n1-5=6\n")), rng)
        is None
    )


def test_a_row_without_a_wrong_step_is_kept_whole_when_asked() -> None:
    codec = CharCodec()
    text = "3+8=1\n1-5=6\n6+7=3\n</think>\n\\boxed{3}<|im_end|>"
    row = example(codec, to_completion(codec, Q, codec.encode(text)))
    rng = random.Random(0)
    assert all(_cut(row, rng, whole_share=1.0) == row for _ in range(10))
    assert any(_cut(row, rng, whole_share=0.0) != row for _ in range(10))
