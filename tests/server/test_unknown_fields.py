"""A client's own top-level fields (Codex's ``client_metadata``, a proxy's tags, a
provider's options) are accepted and ignored, as vLLM's server does, and named in
``X-Thinkgate-Ignored``; thinkgate's own namespace stays strict on every route (a near
miss of a strategy option or of ``budget`` is a 400 naming it). Scripted engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of

ANSWER = "3+4=7\n</think>\\boxed{7}"
MSG = [{"role": "user", "content": "Compute 3+4 mod 10."}]
CODEX = {"client_metadata": {"x-codex-installation-id": "abc"}}


def _handler(tokens: Any) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *[ANSWER] * request.sampling.n)

    return handler


async def test_a_clients_own_fields_are_ignored_and_named_on_every_route(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        m = app.model
        calls = {
            "/v1/chat/completions": {"model": m, "messages": MSG, **CODEX, "colour": "red"},
            "/v1/completions": {"model": m, "prompt": "3+4=", "max_tokens": 8, **CODEX},
            "/v1/responses": {"model": m, "input": "Compute 3+4 mod 10.", **CODEX},
            "/v1/messages": {"model": m, "max_tokens": 64, "messages": MSG, **CODEX},
        }
        for path, body in calls.items():
            got = await app.client.post(path, json=body)
            assert got.status_code == 200, (path, got.text)
            named = got.headers["X-Thinkgate-Ignored"].split(", ")
            assert "client_metadata" in named, (path, named)
        chat = await app.client.post("/v1/chat/completions", json=calls["/v1/chat/completions"])
        assert chat.headers["X-Thinkgate-Ignored"] == "client_metadata, colour"


async def test_a_near_miss_of_thinkgates_names_is_a_400_naming_the_nearest(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        m = app.model
        tree = {"model": m, "messages": MSG, "strategy": "tree", "fork_dpeth": 4}
        got = await app.client.post("/v1/chat/completions", json=tree)
        assert got.status_code == 400, got.text
        error = got.json()["error"]
        assert error["param"] == "fork_dpeth" and "did you mean 'fork_depth'?" in error["message"]
        budgets = {"model": m, "input": "Compute 3+4 mod 10.", "budgets": {"samples": 2}}
        got = await app.client.post("/v1/responses", json=budgets)
        assert got.status_code == 400 and "did you mean 'budget'?" in got.text, got.text
        messages = {"model": m, "max_tokens": 64, "messages": MSG, "thinkgate_mode": "x"}
        got = await app.client.post("/v1/messages", json=messages)
        assert got.status_code == 400, got.text
        assert got.json()["type"] == "error" and "thinkgate_mode" in got.text
