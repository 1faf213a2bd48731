"""Selection rules on scripted pools: every testable property of docs/specs.md §3
(Best-of-Majority) and §5 (majority, Best-of-N)."""

from __future__ import annotations

import random

import pytest

from strategies.selection import (
    FALLBACK_EMPTY_FILTER,
    AnswerClass,
    build_classes,
    select_best_of_majority,
    select_best_of_n,
    select_majority,
    top_by_count,
    top_by_reward,
)


def random_pool(rng: random.Random, n: int) -> tuple[list[str | None], list[float]]:
    """A pool whose answers are skewed (a few common, many rare) with noisy rewards."""
    weights = [rng.random() ** 3 for _ in range(8)]
    answers: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.05:
            answers.append(None)
        else:
            answers.append(str(rng.choices(range(8), weights)[0]))
    rewards = [rng.gauss(0.0, 1.0) for _ in range(n)]
    return answers, rewards


def answers_of(classes: tuple[AnswerClass, ...]) -> list[str]:
    return [c.answer for c in classes]


def test_classes_count_mean_reward_and_representative() -> None:
    classes = build_classes(["1", "2", "1", None, "1"], [0.0, 5.0, 3.0, 9.0, 3.0])
    one, two = classes
    assert (one.answer, one.members, one.count, one.first_seen) == ("1", (0, 2, 4), 3, 0)
    assert one.mean_reward == pytest.approx(2.0)
    assert one.representative == 2  # highest reward; first of the tied 2 and 4
    assert one.frequency(5) == pytest.approx(0.6)  # unanswered samples count in N
    assert two.mean_reward == 5.0 and two.representative == 1
    assert build_classes(["1", "1"])[0].representative == 0  # unscored: first member


def test_best_of_n_is_answer_level() -> None:
    # The single best sample says "2", but class "1" has the higher mean reward.
    classes = build_classes(["1", "1", "2", "2"], [3.0, 3.0, 4.0, 0.0])
    assert answers_of(select_best_of_n(classes, 1).chosen) == ["1"]


@pytest.mark.parametrize("seed", range(20))
def test_alpha_zero_equals_best_of_n(seed: int) -> None:
    rng = random.Random(seed)
    answers, rewards = random_pool(rng, 32)
    classes = build_classes(answers, rewards)
    for k in (1, 2, 3, 5):
        bom = select_best_of_majority(classes, k, alpha=0.0, total=32)
        assert bom.rule == "best-of-majority" and bom.fallback is None
        assert bom.chosen == select_best_of_n(classes, k).chosen


@pytest.mark.parametrize("seed", range(20))
def test_k1_alpha_max_freq_equals_majority_for_a_unique_mode(seed: int) -> None:
    rng = random.Random(seed)
    answers, rewards = random_pool(rng, 24)
    classes = build_classes(answers, rewards)
    counts = sorted((c.count for c in classes), reverse=True)
    if len(counts) > 1 and counts[0] == counts[1]:
        answers = answers + [classes[0].answer] * (counts[0] - classes[0].count + 1)
        rewards = rewards + [0.0] * (len(answers) - len(rewards))
        classes = build_classes(answers, rewards)
    total = len(answers)
    alpha = max(c.count for c in classes) / total
    bom = select_best_of_majority(classes, 1, alpha=alpha, total=total)
    assert bom.chosen == select_majority(classes, 1).chosen


@pytest.mark.parametrize("seed", range(30))
def test_returned_classes_distinct_frequent_at_most_k_sorted(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.choice([4, 16, 64])
    answers, rewards = random_pool(rng, n)
    classes = build_classes(answers, rewards)
    k = rng.randint(1, 6)
    alpha = rng.choice([0.0, 0.02, 0.1, 0.25])
    sel = select_best_of_majority(classes, k, alpha=alpha, total=n)
    if sel.fallback is not None:
        return  # the empty-filter case has its own test
    chosen = sel.chosen
    assert len(chosen) <= k
    assert len({c.first_seen for c in chosen}) == len(chosen)
    assert all(c.count / n >= alpha for c in chosen)
    means = [c.mean_reward for c in chosen]
    assert means == sorted(means, reverse=True)  # type: ignore[type-var]
    # Nothing better was left out: every frequent class not returned scores no higher.
    kept = [c for c in classes if c.count / n >= alpha and c not in chosen]
    if len(chosen) == k and kept:
        assert max(c.mean_reward or 0.0 for c in kept) <= (chosen[-1].mean_reward or 0.0)
    else:
        assert not kept  # fewer than k returned only when C ran out


@pytest.mark.parametrize("seed", range(20))
def test_order_independent_apart_from_ties(seed: int) -> None:
    rng = random.Random(seed)
    n = 40
    answers, _ = random_pool(rng, n)
    # Distinct rewards per sample give distinct class means (a tie has probability 0).
    rewards = [rng.random() for _ in range(n)]
    order = list(range(n))
    rng.shuffle(order)
    shuffled_a = [answers[i] for i in order]
    shuffled_r = [rewards[i] for i in order]
    base = build_classes(answers, rewards)
    perm = build_classes(shuffled_a, shuffled_r)
    for k in (1, 3):
        for alpha in (0.0, 0.05, 0.2):
            a = select_best_of_majority(base, k, alpha=alpha, total=n)
            b = select_best_of_majority(perm, k, alpha=alpha, total=n)
            if a.fallback is None:
                assert answers_of(a.chosen) == answers_of(b.chosen)
                # Representatives are the same samples (by reward) in both orders.
                assert [rewards[base_c.representative] for base_c in a.chosen] == [
                    shuffled_r[perm_c.representative] for perm_c in b.chosen
                ]
    counts = sorted({c.count for c in base})
    if len(counts) == len(base):  # distinct counts: majority is order independent too
        assert answers_of(top_by_count(base, 3)) == answers_of(top_by_count(perm, 3))


def test_ties_go_to_the_class_seen_first() -> None:
    classes = build_classes(["7", "3", "3", "7"], [1.0, 2.0, 0.0, 1.0])
    assert answers_of(top_by_count(classes, 1)) == ["7"]
    assert answers_of(top_by_reward(classes, 2)) == ["7", "3"]  # both means are 1.0


def test_empty_filter_falls_back_to_majority() -> None:
    classes = build_classes(["1", "2", "2", "3"], [9.0, 0.0, 0.0, 5.0])
    sel = select_best_of_majority(classes, 2, alpha=0.75, total=4)
    assert sel.rule == "majority" and sel.fallback == FALLBACK_EMPTY_FILTER
    assert answers_of(sel.chosen) == ["2", "1"]
    assert answers_of(select_best_of_majority(classes, 1, alpha=0.5, total=4).chosen) == ["2"]


def test_bom_filters_rare_high_reward_answers() -> None:
    # The reward model loves a one-off answer (reward hacking); BoM's filter drops it.
    answers = ["5"] * 6 + ["2"] * 3 + ["8"]
    rewards = [1.0] * 6 + [0.5] * 3 + [10.0]
    classes = build_classes(answers, rewards)
    assert answers_of(select_best_of_n(classes, 1).chosen) == ["8"]
    bom = select_best_of_majority(classes, 2, alpha=0.2, total=10)
    assert answers_of(bom.chosen) == ["5", "2"]


def test_no_classes_and_bad_arguments() -> None:
    assert select_best_of_majority((), 1, alpha=0.5, total=3).chosen == ()
    with pytest.raises(ValueError):
        select_majority(build_classes(["1"]), 0)
    with pytest.raises(ValueError):
        select_best_of_majority(build_classes(["1"], [0.0]), 1, alpha=1.5, total=1)
    with pytest.raises(ValueError):
        select_best_of_n(build_classes(["1"]), 1)  # unscored
    with pytest.raises(ValueError):
        build_classes(["1", "2"], [0.0])
