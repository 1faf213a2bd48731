"""Bad inputs and what the gateway answers (status, param): the gateway's own checks
(``CHAT_CASES``, ``COMPLETION_CASES``: fast tier, test_bad_inputs_gateway.py) and the
values only vLLM checks (``ENGINE_*``: live, test_bad_inputs.py)."""

from __future__ import annotations

from typing import Any

import httpx

MSG = [{"role": "user", "content": "Compute 1+2 mod 10."}]
M = "__model__"  # replaced by the served model name
_TOOL = {"type": "function", "function": {"name": "calculator"}}
_NAMED = {"type": "function", "function": {"name": "weather"}}
_SCHEMA_FORMAT_NO_NAME = {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}
_BOGUS_SCHEMA = {"name": "x", "schema": {"type": "a"}}
_BOGUS_SCHEMA_FORMAT = {"type": "json_schema", "json_schema": _BOGUS_SCHEMA}

CHAT_CASES: list[tuple[str, Any, dict[str, str], int, str | None]] = [
    ("malformed json", b'{"model": ', {}, 400, None),
    ("empty body", b"", {}, 400, None),
    ("not an object", b"[1, 2]", {}, 400, None),
    ("missing model", {"messages": MSG}, {}, 400, "model"),
    ("unknown model", {"model": "gpt-9", "messages": MSG}, {}, 404, "model"),
    ("no messages", {"model": M, "messages": []}, {}, 400, "messages"),
    ("messages not a list", {"model": M, "messages": "hi"}, {}, 400, "messages"),
    (
        "bad role",
        {"model": M, "messages": [{"role": "robot", "content": "x"}]},
        {},
        400,
        "messages.0.role",
    ),
    (
        "content not text",
        {"model": M, "messages": [{"role": "user", "content": 5}]},
        {},
        400,
        "messages.0.content",
    ),
    ("user without content", {"model": M, "messages": [{"role": "user"}]}, {}, 400, "messages.0"),
    (
        "unknown strategy header",
        {"model": M, "messages": MSG},
        {"X-Strategy": "magic"},
        400,
        "X-Strategy",
    ),
    (
        "unknown strategy body",
        {"model": M, "messages": MSG, "strategy": "magic"},
        {},
        400,
        "strategy",
    ),
    (
        "negative budget",
        {"model": M, "messages": MSG},
        {"X-Budget-Thinking": "-5"},
        400,
        "X-Budget-Thinking",
    ),
    (
        "non-integer budget",
        {"model": M, "messages": MSG, "budget": {"thinking": 2.5}},
        {},
        400,
        "budget.thinking",
    ),
    (
        "bool budget",
        {"model": M, "messages": MSG, "budget": {"solution": True}},
        {},
        400,
        "budget.solution",
    ),
    (
        "string budget",
        {"model": M, "messages": MSG, "budget": {"thinking": "9"}},
        {},
        400,
        "budget.thinking",
    ),
    (
        "absurd budget",
        {"model": M, "messages": MSG},
        {"X-Budget-Solution": "999999999"},
        400,
        "X-Budget-Solution",
    ),
    (
        "samples over cap",
        {"model": M, "messages": MSG},
        {"X-Budget-Samples": "100000"},
        400,
        "X-Budget-Samples",
    ),
    (
        "unhonoured budget",
        {"model": M, "messages": MSG},
        {"X-Strategy": "plain", "X-Budget-Thinking": "4"},
        400,
        "X-Budget-Thinking",
    ),
    (
        "effort for plain",
        {"model": M, "messages": MSG, "strategy": "plain", "reasoning_effort": "low"},
        {},
        400,
        "reasoning_effort",
    ),
    (
        "bad effort",
        {"model": M, "messages": MSG, "reasoning_effort": "ultra"},
        {},
        400,
        "reasoning_effort",
    ),
    ("n over cap", {"model": M, "messages": MSG, "n": 10_000}, {}, 400, "n"),
    ("n zero", {"model": M, "messages": MSG, "n": 0}, {}, 400, "n"),
    ("n as string", {"model": M, "messages": MSG, "n": "2"}, {}, 400, "n"),
    ("temperature high", {"model": M, "messages": MSG, "temperature": 7}, {}, 400, "temperature"),
    (
        "temperature negative",
        {"model": M, "messages": MSG, "temperature": -1},
        {},
        400,
        "temperature",
    ),
    ("top_p zero", {"model": M, "messages": MSG, "top_p": 0}, {}, 400, "top_p"),
    ("max_tokens zero", {"model": M, "messages": MSG, "max_tokens": 0}, {}, 400, "max_tokens"),
    (
        "max_tokens past context",
        {"model": M, "messages": MSG, "max_tokens": 100_000},
        {},
        400,
        "max_tokens",
    ),
    (
        "max tokens disagree",
        {"model": M, "messages": MSG, "max_tokens": 5, "max_completion_tokens": 6},
        {},
        400,
        "max_completion_tokens",
    ),
    (
        "tool without its function",
        {"model": M, "messages": MSG, "tools": [{"type": "function"}]},
        {},
        400,
        "tools.0.function",
    ),
    # thinkgate's own fields are strict (a client's own unknown field is ignored).
    ("thinkgate's prefix", {"model": M, "messages": MSG, "thinkgate_x": 1}, {}, 400, "thinkgate_x"),
    (
        "misspelt vLLM field",
        {"model": M, "messages": MSG, "min_pp": 0.1},
        {},
        400,
        "min_pp",
    ),
    (
        "misspelt option",
        {"model": M, "messages": MSG, "strategy": "best-of-majority", "alhpa": 0.1},
        {},
        400,
        "alhpa",
    ),
    ("top_k below -1", {"model": M, "messages": MSG, "top_k": -2}, {}, 400, "top_k"),
    ("top_k not int", {"model": M, "messages": MSG, "top_k": 1.5}, {}, 400, "top_k"),
    ("min_p above 1", {"model": M, "messages": MSG, "min_p": 1.5}, {}, 400, "min_p"),
    (
        "repetition_penalty 0",
        {"model": M, "messages": MSG, "repetition_penalty": 0},
        {},
        400,
        "repetition_penalty",
    ),
    ("min_tokens negative", {"model": M, "messages": MSG, "min_tokens": -1}, {}, 400, "min_tokens"),
    (
        "min_tokens with a budget",
        {"model": M, "messages": MSG, "min_tokens": 4, "budget": {"thinking": 8}},
        {},
        400,
        "min_tokens",
    ),
    ("metadata not strings", {"model": M, "messages": MSG, "metadata": {"a": 1}}, {}, 400, None),
    (
        "prompt too long",
        {"model": M, "messages": [{"role": "user", "content": "1+" * 400}]},
        {},
        400,
        "messages",
    ),
    ("seed past int64", {"model": M, "messages": MSG, "seed": 2**64}, {}, 400, "seed"),
]

# Only vLLM checks these: its message is mapped to a 400 naming the field (live only).
ENGINE_CHAT_CASES: list[tuple[str, Any, dict[str, str], int, str | None]] = [
    (
        "a schema the grammar cannot compile",  # xgrammar's check, named
        {"model": M, "messages": MSG, "response_format": _BOGUS_SCHEMA_FORMAT},
        {},
        400,
        "response_format",
    ),
    (
        "min_tokens past max_tokens",  # vLLM's own check, named
        {"model": M, "messages": MSG, "min_tokens": 9, "max_tokens": 4},
        {},
        400,
        "min_tokens",
    ),
    ("greedy with n", {"model": M, "messages": MSG, "n": 2, "temperature": 0}, {}, 400, "n"),
    (
        "greedy with n, streamed",
        {"model": M, "messages": MSG, "n": 2, "temperature": 0, "stream": True},
        {},
        400,
        "n",
    ),
    ("empty stop", {"model": M, "messages": MSG, "stop": ""}, {}, 400, "stop"),
    ("empty stop in a list", {"model": M, "messages": MSG, "stop": ["x", ""]}, {}, 400, "stop"),
    (
        "empty stop, streamed",
        {"model": M, "messages": MSG, "stop": "", "stream": True},
        {},
        400,
        "stop",
    ),
    (
        "top_logprobs without logprobs",
        {"model": M, "messages": MSG, "top_logprobs": 2},
        {},
        400,
        "top_logprobs",
    ),
    (
        "top_logprobs past 20",
        {"model": M, "messages": MSG, "logprobs": True, "top_logprobs": 21},
        {},
        400,
        "top_logprobs",
    ),
    ("logprobs not a bool", {"model": M, "messages": MSG, "logprobs": 1}, {}, 400, "logprobs"),
    (
        "logprobs under a strategy that does not return them",
        {"model": M, "messages": MSG, "logprobs": True},
        {"X-Strategy": "beam-search"},
        400,
        "logprobs",
    ),
    (
        "tool_choice required under a strategy without the answer's grammar",
        {"model": M, "messages": MSG, "tools": [_TOOL], "tool_choice": "required"},
        {"X-Strategy": "deepconf"},
        400,
        "tool_choice",
    ),
    (
        "tool_choice naming a function not offered",
        {"model": M, "messages": MSG, "tools": [_TOOL], "tool_choice": _NAMED},
        {},
        400,
        "tool_choice",
    ),
    (
        "tool_choice without tools",
        {"model": M, "messages": MSG, "tool_choice": "auto"},
        {},
        400,
        "tool_choice",
    ),  # fmt: skip
    (
        "a tool name OpenAI refuses",
        {"model": M, "messages": MSG, "tools": [{**_TOOL, "function": {"name": "a b"}}]},
        {},
        400,
        "tools.0.function.name",
    ),
    (
        "response_format with a solution budget under one-pass budget guidance",
        {
            "model": M,
            "messages": MSG,
            "response_format": {"type": "json_object"},
            "budget": {"thinking": 16, "solution": 8},
        },
        {"X-Strategy": "budget-guidance"},
        400,
        "response_format",
    ),
    (
        "tools with response_format under a strategy that applies no grammar",
        {"model": M, "messages": MSG, "tools": [_TOOL], "response_format": {"type": "json_object"}},
        {"X-Strategy": "deepconf"},
        400,
        "response_format",
    ),
    (
        "response_format of an unknown type",
        {"model": M, "messages": MSG, "response_format": {"type": "yaml"}},
        {},
        400,
        "response_format",
    ),
    (
        "json_schema without its name",
        {"model": M, "messages": MSG, "response_format": _SCHEMA_FORMAT_NO_NAME},
        {},
        400,
        "response_format.json_schema.name",
    ),
    (
        "response_format under a strategy that does not apply it",
        {"model": M, "messages": MSG, "response_format": {"type": "json_object"}},
        {"X-Strategy": "deepconf"},
        400,
        "response_format",
    ),
    (
        "answer_field without response_format",
        {"model": M, "messages": MSG, "strategy": "self-consistency", "answer_field": "a"},
        {},
        400,
        "answer_field",
    ),
    (
        "response_format with a solution budget in one pass",
        {
            "model": M,
            "messages": MSG,
            "response_format": {"type": "json_object"},
            "strategy": "elastic",
            "budget": {"solution": 8},
            "elastic_mode": "one-pass",
        },
        {},
        400,
        "elastic_mode",
    ),
]


# The gateway's own checks of a completions prompt (fast tier, and one witness live).
COMPLETION_CASES: list[tuple[dict[str, Any], str | None]] = [
    ({"model": M}, "prompt"),
    ({"model": M, "prompt": ""}, "prompt"),
    ({"model": M, "prompt": []}, "prompt"),
    ({"model": M, "prompt": [1, "a"]}, "prompt"),
    ({"model": M, "prompt": "x" * 600}, "prompt"),
    ({"model": M, "prompt": "hi", "echo": True, "stream": True}, "echo"),
    ({"model": M, "prompt": "hi", "echo": 1}, "echo"),
    ({"model": M, "prompt": "hi", "logprobs": 21}, "logprobs"),
    ({"model": M, "prompt": "hi", "logprobs": True}, "logprobs"),
    ({"model": M, "prompt": "hi", "top_logprobs": 2}, "top_logprobs"),
    ({"model": M, "prompt": "hi", "response_format": {"type": "json_object"}}, "response_format"),
    ({"model": M, "prompt": "hi", "logprobs": 1, "strategy": "elastic"}, "logprobs"),
    (
        {"model": M, "prompt": "hi", "logprobs": 1, "echo": True, "strategy": "self-consistency"},
        "echo",
    ),
    ({"model": M, "prompt": [2**70]}, "prompt"),  # was a 500 on the remote engine (fuzz)
    ({"model": M, "prompt": "\u00e9"}, "prompt"),  # text the tokenizer drops: no tokens
]
# Only vLLM checks these (live only).
ENGINE_COMPLETION_CASES: list[tuple[dict[str, Any], str | None]] = [
    ({"model": M, "prompt": [999_999]}, "prompt"),  # vLLM: token id outside the vocabulary
    # Just past the testbed's vocabulary: a remote vLLM server answered 500 (the fuzz).
    ({"model": M, "prompt": [1378]}, "prompt"),
    ({"model": M, "prompt": [1, 99_999]}, "prompt"),
    ({"model": M, "prompt": [1378], "stream": True}, "prompt"),
    ({"model": M, "prompt": "hi", "stop": ""}, "stop"),  # vLLM's check, named
]


def check_error(r: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    """``r`` is the OpenAI error envelope with ``status``, naming ``param`` when given."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["X-Request-Id"]
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param, error
    return error  # type: ignore[no-any-return]
