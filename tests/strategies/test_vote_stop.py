"""The majority vote's stop rule (``strategies.vote_stop``) over the real app with a
scripted engine: the draw stops as soon as the Beta posterior clears, a split vote draws
to the cap, a stage the ceiling cannot afford is not started, every sample drawn is in
the vote, the stages continue one seeded pool, and ``auto`` runs its sampling plans with
the rule (``adaptive: false`` turns it off) and says what it did."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from strategies.selection import AnswerClass
from strategies.vote_stop import VoteStop, leads, settled

QUESTION = [{"role": "user", "content": "Compute 3+4 mod 10."}]


def _answers(tokens: Any, said: Iterator[int]) -> Callable[[GenerateRequest], Sequence[Sample]]:
    """Each sample drawn answers the next of ``said``."""

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        out = [f"3+4=7\n</think>\\boxed{{{next(said)}}}" for _ in range(request.sampling.n)]
        return samples_of(tokens, *out)

    return handler


def _cycle(*values: int) -> Iterator[int]:
    while True:
        yield from values


def test_the_posterior_and_when_it_settles() -> None:
    assert leads(4, 0) == pytest.approx(0.96875)
    assert leads(5, 1) == pytest.approx(0.9375)
    assert leads(7, 1) > 0.95 > leads(3, 1)

    def classes(*sizes: int) -> list[AnswerClass]:
        members = iter(range(100))
        return [
            AnswerClass(
                answer=str(i),
                members=tuple(next(members) for _ in range(n)),
                rewards=(),
                first_seen=i,
            )
            for i, n in enumerate(sizes)
        ]

    rule = VoteStop()
    assert settled(classes(2), rule)[0] is False  # fewer than 3 answered: not read
    assert settled(classes(4), rule)[0] is True
    assert settled(classes(5, 1), rule)[0] is False
    assert settled(classes(7, 1), rule)[0] is True
    assert settled(classes(4, 4), rule)[0] is False


async def _ask(app: Any, strategy: str, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    r = await app.client.post(
        "/v1/chat/completions",
        json={"model": app.model, "messages": QUESTION, **body},
        headers={"X-Strategy": strategy, **headers},
    )
    assert r.status_code == 200, r.text
    info: dict[str, Any] = r.json()["thinkgate"]
    return info


async def test_an_agreeing_vote_stops_at_the_first_stage_that_settles_it(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_answers(testbed_tokens, _cycle(7))) as app:
        info = await _ask(
            app, "self-consistency", {"adaptive": True, "seed": 11}, **{"X-Budget-Samples": "8"}
        )
    assert info["samples"] == 4 and info["adaptive"]["stopped"] == "settled"
    assert info["adaptive"]["rounds"] == 2 and info["adaptive"]["posterior"] >= 0.95
    calls = app.engine.calls
    assert [c.sampling.n for c in calls] == [2, 2]
    assert [c.sampling.seed for c in calls] == [11, 13]  # one pool: stage 2 continues it


async def test_a_split_vote_draws_to_the_cap_and_every_sample_votes(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_answers(testbed_tokens, _cycle(7, 3))) as app:
        info = await _ask(app, "self-consistency", {"adaptive": True}, **{"X-Budget-Samples": "8"})
    assert info["samples"] == 8 and info["adaptive"]["stopped"] == "cap"
    assert sum(c.sampling.n for c in app.engine.calls) == 8
    assert len(info["sample_answers"]) == 8  # every drawn sample in the vote


async def test_a_stage_the_ceiling_cannot_afford_is_not_started(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_answers(testbed_tokens, _cycle(7, 3))) as app:
        r = await app.client.post(
            "/v1/chat/completions",
            json={"model": app.model, "messages": QUESTION, "adaptive": True},
            headers={
                "X-Strategy": "self-consistency",
                "X-Budget-Samples": "16",
                "X-Budget-Tokens": "120",
            },
        )
    body = r.json()
    assert r.status_code == 200, r.text
    assert body["usage"]["completion_tokens"] <= 120
    calls = app.engine.calls
    assert sum(c.sampling.n * (c.sampling.max_tokens or 0) for c in calls) <= 120
    assert body["thinkgate"]["samples"] < 16


async def test_the_rule_is_refused_beside_a_confidence_vote(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_answers(testbed_tokens, _cycle(7))) as app:
        r = await app.client.post(
            "/v1/chat/completions",
            json={"model": app.model, "messages": QUESTION, "adaptive": True, "vote": "confidence"},
            headers={"X-Strategy": "self-consistency"},
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "adaptive"
        r = await app.client.post(
            "/v1/chat/completions",
            json={"model": app.model, "messages": QUESTION, "adaptive_confidence": 0.9},
            headers={"X-Strategy": "self-consistency"},
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "adaptive_confidence"


async def test_auto_stops_its_vote_when_settled_and_says_so(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    # No table (auto_table none): the rule plans self-consistency for a roomy ceiling.
    async with scripted_app(_answers(testbed_tokens, _cycle(7)), auto_table="none") as app:
        info = await _ask(app, "auto", {}, **{"X-Budget-Tokens": "4000"})
        whole = await _ask(app, "auto", {"adaptive": False}, **{"X-Budget-Tokens": "4000"})
    plan = info["auto"]
    assert plan["strategy"] == "self-consistency" and plan["samples"] > 4
    assert plan["stopped"] == "settled" and plan["stages"] == 2
    assert plan["unspent_samples"] == plan["samples"] - 4 == plan["samples"] - info["samples"]
    assert "stages" not in whole["auto"] and whole["samples"] == whole["auto"]["samples"]


async def test_each_stage_is_a_progress_event_with_the_posterior(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """What the live view shows of a staged vote: after each stage, the samples drawn,
    the posterior and whether it settled."""
    import orjson

    async with scripted_app(_answers(testbed_tokens, _cycle(7))) as app:
        r = await app.client.post(
            "/v1/chat/completions",
            json={"model": app.model, "messages": QUESTION, "adaptive": True, "stream": True},
            headers={"X-Strategy": "self-consistency", "X-Budget-Samples": "8"},
        )
    stages = [
        orjson.loads(line.split(" ", 2)[2])
        for line in r.text.splitlines()
        if line.startswith(": thinkgate.progress") and '"posterior"' in line
    ]
    assert [(s["samples"], s["settled"]) for s in stages] == [(2, False), (4, True)]
    assert stages[-1]["posterior"] >= 0.95 and "leader_share" not in stages[-1]


def test_the_fit_replays_the_rule_on_pools_and_keeps_the_lowest_confidence_that_agrees() -> None:
    from server.calibrate.fit_stop import CANDIDATES, fit_stop, replay
    from strategies.pets.calibration.simulate import Pool

    # 3 to 1 after 4 samples is 0.81; 5 to 1 after 6 is 0.94; 7 to 1 after 8 is 0.98.
    one_off = (0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert replay(one_off, VoteStop(confidence=0.8)) == (0, 4)
    assert replay(one_off, VoteStop(confidence=0.95)) == (0, 8)
    assert replay((None,) * 16, VoteStop()) == (None, 16)  # nothing answered: the cap
    # Agreeing pools agree at every confidence (4 of 4 is 0.97, 6 of 6 0.99): the lowest,
    # fewest samples, is kept.
    agreeing = [Pool(labels=(0,) * 32, gold=0)] * 10
    easy = fit_stop(agreeing)
    assert easy.chosen_by == "fit" and easy.confidence == CANDIDATES[0]
    assert [c.samples for c in easy.candidates] == [4.0, 4.0, 4.0, 4.0, 6.0, 6.0]
    # A pool whose first samples lead the wrong way: a low confidence stops on the wrong
    # answer, so the fit keeps a confidence high enough to draw on.
    misleading = Pool(labels=(1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), gold=0)
    fitted = fit_stop([*agreeing, misleading] * 10)
    low = next(c for c in fitted.candidates if c.confidence == 0.8)
    assert low.agreement < 0.99 and low.accuracy < 1.0
    assert fitted.chosen_by == "fit" and fitted.confidence > 0.8
    chosen = next(c for c in fitted.candidates if c.confidence == fitted.confidence)
    assert chosen.agreement >= 0.99 and chosen.accuracy == 1.0
    assert fit_stop([]).chosen_by == "default" and fit_stop([]).confidence == VoteStop().confidence


async def test_auto_stops_its_votes_at_the_confidence_its_table_was_fitted_with(
    tmp_path: Any, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    import json

    def table(stop: float | None) -> str:
        path = tmp_path / f"table-{stop}.json"
        row = {"strategy": "self-consistency", "samples": 8, "thinking": None}
        row |= {"accuracy": 0.9, "tokens": 400.0, "seconds": 1.0}
        doc: dict[str, Any] = {"model": "testbed-base", "questions": 40, "rows": [row]}
        if stop is not None:
            doc["stop_confidence"] = stop
        path.write_text(json.dumps(doc))
        return str(path)

    ended = {}
    for stop in (None, 0.8):
        # 7, 7, 7, 3 over and over: 3 to 1 after 4 samples (0.81), 6 to 2 after 8 (0.91).
        handler = _answers(testbed_tokens, _cycle(7, 7, 7, 3))
        async with scripted_app(handler, auto_table=table(stop)) as app:
            info = await _ask(app, "auto", {}, **{"X-Budget-Tokens": "4000"})
        assert info["auto"]["strategy"] == "self-consistency"
        ended[stop] = (info["auto"]["stages"], info["auto"]["stopped"], info["samples"])
    # The default (0.95) draws all 8; the fitted 0.8 stops settled after 4.
    assert ended == {None: (4, "cap", 8), 0.8: (2, "settled", 4)}
