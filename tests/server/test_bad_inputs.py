"""Every bad input is answered with the right status and the OpenAI envelope naming the
param, before anything reaches the engine (or, for values only vLLM checks, as a 400
mapped from its error).

The cases (``CHAT_CASES``, ``COMPLETION_CASES``) run in the fast tier on the gateway over a
scripted engine that fails if called (tests/server/test_bad_inputs_gateway.py); here, on
the live server and real engine (local and remote), run what only vLLM checks
(``ENGINE_*``), one gateway case per route as the end-to-end witness, and the engine's
health after them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from bad_input_cases import (
    CHAT_CASES,
    COMPLETION_CASES,
    ENGINE_CHAT_CASES,
    ENGINE_COMPLETION_CASES,
    MSG,
    M,
    check_error,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]


def _send(
    base_url: str, path: str, body: Any, headers: dict[str, str], model: str
) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(
            f"{base_url}{path}",
            content=body,
            headers={"content-type": "application/json", **headers},
            timeout=60,
        )
    body = {k: (model if v == M else v) for k, v in body.items()}
    return httpx.post(f"{base_url}{path}", json=body, headers=headers, timeout=60)


LIVE_CHAT_CASES = [c for c in CHAT_CASES if c[0] == "negative budget"] + ENGINE_CHAT_CASES


@pytest.mark.parametrize(
    ("name", "body", "headers", "status", "param"),
    LIVE_CHAT_CASES,
    ids=[c[0] for c in LIVE_CHAT_CASES],
)
def test_chat_bad_input(
    base_url: str,
    served_model: str,
    name: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    param: str | None,
) -> None:
    r = _send(base_url, "/v1/chat/completions", body, headers, served_model)
    error = check_error(r, status, param)
    if param and param.startswith(("X-Budget", "budget.")):
        assert error["code"] == "invalid_budget"


@pytest.mark.parametrize(("body", "param"), COMPLETION_CASES[:1] + ENGINE_COMPLETION_CASES)
def test_completions_bad_input(
    base_url: str, served_model: str, body: dict[str, Any], param: str | None
) -> None:
    check_error(_send(base_url, "/v1/completions", body, {}, served_model), 400, param)


def test_body_too_large_is_413(base_url: str, served_model: str) -> None:
    body = {"model": served_model, "messages": [{"role": "user", "content": "x" * 2_000_000}]}
    check_error(_send(base_url, "/v1/chat/completions", body, {}, served_model), 413, None)


def test_unknown_route_and_method(base_url: str) -> None:
    check_error(httpx.get(f"{base_url}/v1/nothing"), 404, None)
    check_error(httpx.get(f"{base_url}/v1/chat/completions"), 405, None)


def test_the_engine_lives_on_after_bad_requests(base_url: str, served_model: str) -> None:
    ok = httpx.post(
        f"{base_url}/v1/chat/completions",
        timeout=60,
        json={"model": served_model, "messages": MSG, "max_tokens": 5},
    )
    assert ok.status_code == 200
    assert httpx.get(f"{base_url}/ready").status_code == 200


@pytest.mark.parametrize("seed", [2**63 - 1, -(2**63)])
def test_seeds_at_the_int64_bounds_are_served(base_url: str, served_model: str, seed: int) -> None:
    # The bound the protocol puts on seed (past it: a 400 naming it) is what engines take.
    body = {"model": served_model, "prompt": "1+2", "max_tokens": 2, "seed": seed}
    r = httpx.post(f"{base_url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
