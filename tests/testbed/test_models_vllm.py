"""The shipped testbed models, served by the real vLLM engine (CPU): format and targets.

One engine per model, module-scoped. Thresholds sit below the card's numbers (small
samples), but far above what an untrained or wrong model reaches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

import pytest

from testbed import model_path
from testbed.engine import classify, generate, generate_with_cut, load_llm, reward_text
from testbed.evaluate import cut_report
from testbed.metrics import auroc, line_stats, majority
from testbed.task import Question, make_questions
from testbed.tokenizer import CHARACTERS, IM_END, CharCodec, chat_prompt
from testbed.traces import classify_line

if TYPE_CHECKING:
    from vllm import LLM

    from testbed.engine import Completion

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _engine(name: str, runner: Literal["generate", "pooling"] = "generate") -> Iterator[LLM]:
    llm = load_llm(model_path(name), runner=runner, seed=0, in_process=True)
    yield llm
    del llm


@pytest.fixture(scope="module")
def base() -> Iterator[LLM]:
    yield from _engine("base")


@pytest.fixture(scope="module")
def elastic() -> Iterator[LLM]:
    yield from _engine("elastic")


@pytest.fixture(scope="module")
def reward() -> Iterator[LLM]:
    yield from _engine("reward", runner="pooling")


def per_ops(n: int, lo: int, hi: int, seed: int = 11) -> list[Question]:
    out: list[Question] = []
    for ops in range(lo, hi + 1):
        out += make_questions("test", n, seed=seed, min_ops=ops, max_ops=ops)
    return out


def test_engine_tokenizer_roundtrips_every_character(base: LLM) -> None:
    tok = base.get_tokenizer()
    codec = CharCodec()
    text = chat_prompt("Compute 3+8-5+7 mod 10.") + "3+8=1\n</think>\n\\boxed{1}" + IM_END
    for case in [text, CHARACTERS, *CHARACTERS]:
        ids = tok.encode(case, add_special_tokens=False)
        assert ids == codec.encode(case), repr(case)
        assert tok.decode(ids, skip_special_tokens=False) == case, repr(case)


def test_base_output_format(base: LLM) -> None:
    codec = CharCodec()
    done = [g[0] for g in generate(base, per_ops(2, 1, 12))]
    for c in done:
        assert c.token_ids.count(codec.think_end_id) == 1, c.text
        assert c.token_ids[-1] == codec.eos_id, c.text
        assert c.answer is not None, c.text
        after = c.text.split("</think>", 1)[1]
        assert after == f"\n\\boxed{{{c.answer}}}{IM_END}", c.text
        kinds = [classify_line(line) for line in c.thinking.splitlines() if line]
        assert kinds and "other" not in kinds, c.text


def test_base_greedy_accuracy_on_easy_questions(base: LLM) -> None:
    done = [g[0] for g in generate(base, per_ops(10, 1, 4))]
    accuracy = sum(c.correct for c in done) / len(done)
    assert accuracy >= 0.9, accuracy


def test_base_thinking_grows_with_difficulty(base: LLM) -> None:
    done = [g[0] for g in generate(base, per_ops(8, 2, 2) + per_ops(8, 12, 12))]
    two = [c.thinking_tokens for c in done if c.question.ops == 2]
    twelve = [c.thinking_tokens for c in done if c.question.ops == 12]
    assert sum(twelve) / len(twelve) >= 3 * sum(two) / len(two)


@pytest.fixture(scope="module")
def sampled(base: LLM) -> list[list[Completion]]:
    # 8-12 operations at T=1: long enough traces to hold many check and merged lines.
    return generate(base, per_ops(4, 8, 12), n=16, temperature=1.0)


@pytest.mark.acceptance
def test_base_voting_beats_one_sample(sampled: list[list[Completion]]) -> None:
    # One sample at T=1 is right 0.5-0.9 of the time here and its errors scatter over the
    # other digits, so a majority of 16 recovers them (see the card's 6-12 numbers). The
    # issue asks for at least 10 points.
    single = sum(c.correct for g in sampled for c in g) / sum(len(g) for g in sampled)
    votes = [majority(c.answer for c in g) == g[0].question.answer for g in sampled]
    vote = sum(votes) / len(votes)
    assert vote >= single + 0.10, (single, vote)


@pytest.mark.acceptance
def test_base_sampled_lines_follow_the_training_rates(sampled: list[list[Completion]]) -> None:
    stats = line_stats(c for g in sampled for c in g)
    assert 0.45 <= stats.check_rate <= 0.8, stats  # trained 0.6 (0.64 in the focus phase)
    assert 0.07 <= stats.merge_rate <= 0.2, stats  # trained 0.15 (0.135)
    # Merged lines are right most of the time, but not always: 85% in the training traces
    # (traces.MERGE_ERROR), and that is where sampled answers go wrong.
    assert stats.merged_lines >= 50, stats
    assert 0.7 <= stats.merged_correct / stats.merged_lines <= 0.95, stats
    assert stats.step_correct / stats.step_lines >= 0.97, stats


@pytest.mark.acceptance
def test_elastic_beats_base_under_a_thinking_cut(base: LLM, elastic: LLM) -> None:
    qs = per_ops(3, 6, 12)
    b = generate_with_cut(base, qs, tokens_per_op=8)
    e = generate_with_cut(elastic, qs, tokens_per_op=8)
    acc_b = sum(c.correct for c in b) / len(b)
    acc_e = sum(c.correct for c in e) / len(e)
    assert all(c.answer is not None for c in e)
    assert acc_e >= acc_b + 0.2, (acc_b, acc_e)


def test_base_answers_after_a_forced_close(base: LLM) -> None:
    # Budget forcing and elastic budgets on `base` inject `</think>` wherever the budget
    # ends, mid-line included; reasoning models then answer, and so must base (its focus
    # phase has a tenth of cut traces). Without them it went on stepping inside
    # `\boxed{` on up to half of these (23 of 48 at some cuts).
    qs = per_ops(3, 9, 12)
    curve = cut_report(base, qs, (1, 2, 3))["tokens_per_op"]
    assert isinstance(curve, dict) and set(curve) == {"1", "2", "3"}
    answered = sum(round(row["answered"] * len(qs)) for row in curve.values())
    assert answered >= 3 * len(qs) - 1, curve


@pytest.mark.acceptance
def test_reward_model_separates_right_from_wrong(base: LLM, reward: LLM) -> None:
    # All difficulties, as on the card (AUROC ~0.8 on 480 answers); 144 answers here.
    groups = generate(base, per_ops(3, 1, 12, seed=12), n=4, temperature=1.0, seed=12)
    picked = [c for g in groups for c in g]
    scores = classify(reward, [reward_text(c.question, c.text) for c in picked])
    labels = [c.correct for c in picked]
    assert 0 < sum(labels) < len(labels)
    assert auroc(scores, labels) > 0.65
