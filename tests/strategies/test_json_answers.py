"""JSON answers (``response_format``) in the strategies, without vLLM: canonical JSON
values and exact votes (units), the grammar reaching the engine and the vote over a
scripted pool (the real app over ASGI), the two passes a solution budget takes. The same
through the real engine, both engines: tests/server/test_response_format_live.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from core.engine import GenerateRequest, Sample, StructuredOutput
from engines.scripted import samples_of
from strategies.answers import group_answers
from strategies.json_answers import json_answer

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}}
FORMAT = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}
QUESTION = [{"role": "user", "content": "Compute 3+4 mod 10."}]


def test_a_json_answer_is_its_canonical_value() -> None:
    assert json_answer('{"b": 1, "a": [1, 2]}') == '{"a":[1,2],"b":1}'
    assert json_answer('{"a":[1,2],"b":1}') == json_answer('{ "b":1,\n"a":[1, 2] }')
    assert json_answer('{"answer": 7, "why": "3+4"}', "answer") == "7"
    assert json_answer('{"answer": {"x": "é"}}', "answer") == '{"x":"é"}'
    assert json_answer('{"answer":') is None  # cut by its budget: no vote
    assert json_answer('{"other": 1}', "answer") is None
    assert json_answer("[1, 2]", "answer") is None


def test_json_answers_group_exactly_never_as_mathematics() -> None:
    answers = ["1", "1.0", "1", None, '"1"']
    assert [g.members for g in group_answers(answers, exact=True)] == [(0, 2), (1,), (4,)]
    # The default (mathematical) grouping merges 1, 1.0 and the string "1".
    assert [g.members for g in group_answers(answers)][0] == (0, 1, 2, 4)


def _pool_model(tokens: Any, answers: Sequence[str], seen: list[GenerateRequest]) -> Any:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        seen.append(request)
        return samples_of(tokens, *(f"3+4=7\n</think>{a}" for a in answers))

    return handler


async def test_the_grammar_reaches_the_engine_and_plain_returns_each_answer(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    seen: list[GenerateRequest] = []
    async with scripted_app(_pool_model(testbed_tokens, ['{"answer":7}'], seen)) as app:
        r = await app.client.post(
            "/v1/chat/completions",
            json={"model": app.model, "messages": QUESTION, "response_format": FORMAT},
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == '{"answer":7}'
        expected = json.dumps(SCHEMA, sort_keys=True, separators=(",", ":"))
        assert seen[0].sampling.structured == StructuredOutput(kind="json_schema", schema=expected)
        r = await app.client.post(
            "/v1/chat/completions",
            json={
                "model": app.model,
                "messages": QUESTION,
                "response_format": {"type": "json_object"},
            },
        )
        assert seen[1].sampling.structured == StructuredOutput(kind="json_object")
        r = await app.client.post(
            "/v1/chat/completions",
            json={"model": app.model, "messages": QUESTION, "response_format": {"type": "text"}},
        )
        assert r.status_code == 200 and seen[2].sampling.structured is None


@pytest.mark.parametrize(
    ("field", "winner"),
    [
        # Whole values: key order and spacing do not split a vote; 7 and 7.0 differ.
        (None, '{"answer":7,"why":"a"}'),
        # One field: the three 7s win, the first of them answers.
        ("answer", '{"why": "b", "answer": 7}'),
    ],
)
async def test_self_consistency_votes_on_canonical_json(
    scripted_app: Any, testbed_tokens: Any, field: str | None, winner: str
) -> None:
    pool = [
        '{"answer": 7.0, "why": "a"}',
        '{"why": "b", "answer": 7}',
        '{"answer":7,"why":"a"}',
        '{"why":"a", "answer":7}',
        '{"answer":',  # cut: no vote
    ]
    seen: list[GenerateRequest] = []
    async with scripted_app(_pool_model(testbed_tokens, pool, seen)) as app:
        body: dict[str, Any] = {
            "model": app.model,
            "messages": QUESTION,
            "response_format": {"type": "json_object"},
            "strategy": "self-consistency",
            "budget": {"samples": 5},
        }
        if field is not None:
            body["answer_field"] = field
        r = await app.client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["choices"][0]["message"]["content"] == winner
        info = out["thinkgate"]
        assert info["unanswered"] == 1
        counts = {c["answer"]: c["count"] for c in info["classes"]}
        if field is None:
            assert counts == {'{"answer":7.0,"why":"a"}': 1, '{"answer":7,"why":"b"}': 1,
                              '{"answer":7,"why":"a"}': 2}  # fmt: skip
        else:
            assert counts == {"7.0": 1, "7": 3}


async def test_a_solution_budget_answers_in_two_passes_with_the_grammar_on_the_answer(
    scripted_app: Any, testbed_tokens: Any
) -> None:
    tokens = testbed_tokens
    seen: list[GenerateRequest] = []

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        seen.append(request)
        if tokens.think_end_id in request.sampling.stop_token_ids:  # the thinking pass
            return samples_of(tokens, "3+4=7\n</think>")
        ids = tuple(tokens.encode('{"answer":7}'))[: request.sampling.max_tokens]
        cut = len(ids) == request.sampling.max_tokens
        return [Sample(index=0, token_ids=ids, finish_reason="length" if cut else "stop")]

    # The engine has the elastic processor: without response_format this is one pass.
    async with scripted_app(handler, processors=frozenset({"elastic"})) as app:
        for solution, finish in ((4, "length"), (40, "stop")):
            seen.clear()
            r = await app.client.post(
                "/v1/chat/completions",
                json={
                    "model": app.model,
                    "messages": QUESTION,
                    "response_format": FORMAT,
                    "strategy": "elastic",
                    "budget": {"thinking": 16, "solution": solution},
                },
            )
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["thinkgate"]["mode"] == "two-pass"
            think, answer = seen
            assert think.sampling.structured is None  # the thinking stays free
            assert answer.sampling.structured is not None
            assert answer.sampling.max_tokens == solution
            assert body["choices"][0]["finish_reason"] == finish
            assert body["thinkgate"]["choices"][0]["solution_cut"] is (finish == "length")


@pytest.mark.parametrize("strategy", ["pets", "budget-guidance"])
async def test_pets_and_budget_guidance_vote_on_canonical_json(
    scripted_app: Any, testbed_tokens: Any, strategy: str
) -> None:
    from kernels.guidance.args import PROCESSOR_NAME as GUIDANCE

    pool = ['{"answer": 7.0}', '{"answer":7}', '{ "answer": 7 }', '{"answer":']
    seen: list[GenerateRequest] = []
    model = _pool_model(testbed_tokens, pool, seen)
    async with scripted_app(model, processors=frozenset({GUIDANCE})) as app:
        r = await app.client.post(
            "/v1/chat/completions",
            json={
                "model": app.model,
                "messages": QUESTION,
                "response_format": {"type": "json_object"},
                "strategy": strategy,
                "budget": {"samples": 4},
                **({"cap": 4} if strategy == "pets" else {}),
            },
        )
    assert r.status_code == 200, r.text
    out = r.json()
    assert all(s.sampling.structured == StructuredOutput(kind="json_object") for s in seen)
    assert out["choices"][0]["message"]["content"] in pool[1:3]  # a 7, not the 7.0
    votes = out["thinkgate"].get("votes") or out["thinkgate"]["classes"]
    assert {c["answer"]: c["count"] for c in votes} == {'{"answer":7.0}': 1, '{"answer":7}': 2}
