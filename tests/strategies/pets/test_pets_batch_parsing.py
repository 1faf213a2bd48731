"""Batch input and options are validated before any engine work (400s, not failures)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.engine import SamplingConfig
from core.errors import InvalidBudget, InvalidRequest
from server.batches.pets_wire import options_from, parse_lines


def line(cid: str, **body: object) -> str:
    return json.dumps(
        {
            "custom_id": cid,
            "body": {"messages": [{"role": "user", "content": "Compute 1+2 mod 10."}], **body},
        }
    )


def test_lines_become_questions_with_their_sampling(testbed_tokens: Any) -> None:
    text = "\n".join([line("a"), "", line("b", temperature=0.5, max_tokens=9999, seed=3)])
    qs = parse_lines(
        text, testbed_tokens, defaults=SamplingConfig(max_tokens=512), max_questions=10
    )
    assert [q.custom_id for q in qs] == ["a", "b"]
    assert qs[0].thinking_open and qs[0].sampling.max_tokens == 512
    assert (qs[1].sampling.temperature, qs[1].sampling.max_tokens, qs[1].sampling.seed) == (
        0.5,
        512,
        3,
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        json.dumps({"custom_id": "a"}),
        line("a") + "\n" + line("a"),
        line("a", max_tokens=0),
    ],
)
def test_bad_input_is_a_400(text: str, testbed_tokens: Any) -> None:
    with pytest.raises(InvalidRequest):
        parse_lines(text, testbed_tokens, defaults=SamplingConfig(), max_questions=10)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"seed": "x"}, "body.seed"),
        ({"seed": 2**63}, "body.seed"),
        ({"temperature": -0.5}, "body.temperature"),
        ({"temperature": float("nan")}, "body.temperature"),
        ({"temperature": float("inf")}, "body.temperature"),
        ({"top_p": 0}, "body.top_p"),
        ({"top_p": float("nan")}, "body.top_p"),
        ({"max_tokens": True}, "body.max_tokens"),
        ({"max_completion_tokens": "9"}, "body.max_completion_tokens"),
        ({"n": 0}, "body.n"),
        ({"messages": [{"role": "user"}]}, "body.messages"),
        ({"messages": [[]]}, "body.messages.0: must be a JSON object"),  # not "the body"
        ({"modalities": ["audio"]}, "body.modalities"),
        ({"audio": {"voice": "x"}}, "body.audio is not supported"),  # refused online too
    ],
)
def test_every_field_is_checked_as_the_chat_route_checks_it(
    body: dict[str, object], field: str, testbed_tokens: Any
) -> None:
    """One validator for the online route and the background lines: a bad field is a
    400 at submission naming the line and the field, never a 500 in a job later."""
    text = line("good") + "\n" + line("bad", **body)
    with pytest.raises(InvalidRequest) as info:
        parse_lines(text, testbed_tokens, defaults=SamplingConfig(), max_questions=10)
    assert info.value.message.startswith(f"line 2: {field}"), info.value.message
    assert info.value.status == 400


@pytest.mark.parametrize("separator", ["\x1e", "\x0c", "\u2028", "\x85"])
def test_lines_are_numbered_as_jsonl_numbers_them(separator: str, testbed_tokens: Any) -> None:
    """Only a newline ends a line: characters ``str.splitlines`` also breaks on (inside a
    JSON string, or in noise) neither split a line nor shift the next one's number."""
    inside = json.loads(line("good"))
    inside["body"]["messages"][0]["content"] = f"Compute 1{separator}+2 mod 10."
    good = json.dumps(inside, ensure_ascii=False)
    qs = parse_lines(good, testbed_tokens, defaults=SamplingConfig(), max_questions=10)
    assert len(qs) == 1
    text = line("a") + "\n" + f"{separator}noise" + "\n" + line("c")
    with pytest.raises(InvalidRequest) as info:
        parse_lines(text, testbed_tokens, defaults=SamplingConfig(), max_questions=10)
    assert info.value.message.startswith("line 2:"), info.value.message


def test_options_need_exactly_one_budget_and_sane_caps() -> None:
    opts = options_from({"average_budget": "2.5", "cap": "8"}, 10, max_cap=64)
    assert (opts.total_budget, opts.cap) == (25, 8)
    for params in (
        {},
        {"total_budget": "5", "average_budget": "1"},
        {"total_budget": "0"},
        {"total_budget": "5", "cap": "65"},
        {"total_budget": "x"},
        # Found by the fuzz as 500s: non-finite and 64-bit-overflowing values.
        {"average_budget": "nan"},
        {"average_budget": "inf"},
        {"total_budget": str(2**70)},
        {"total_budget": "5", "seed": str(2**64)},
        {"total_budget": "5", "round_size": "-1"},
    ):
        with pytest.raises(InvalidBudget) as err:
            options_from(params, 10, max_cap=64)
        assert err.value.param is not None
