"""One authorization per request (``server.routes.guard``): the key is checked once on
the generation routes (``POST /v1/responses`` checked it twice before), every route
behind the keys declares the dependency, the open ones do not, and a route that reads
the tenant without it fails loudly (fast: a scripted engine, no vLLM)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from fastapi.routing import APIRoute
from starlette.requests import Request

from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.routes.guard import authorized
from server.settings import Settings
from server.tenancy.auth import tenant_of
from server.tenancy.tenants import Keyring, Tenant

OPEN = {"/health", "/ready", "/metrics"}


def _handler(tokens: Any) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *["3+4=7\n</think>\\boxed{7}"] * request.sampling.n)

    return handler


@pytest.fixture
def identified(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every key ``Keyring.identify`` is asked about, in order."""
    calls: list[str] = []
    identify = Keyring.identify

    def counting(self: Keyring, key: str) -> Tenant:
        calls.append(key)
        return identify(self, key)

    monkeypatch.setattr(Keyring, "identify", counting)
    return calls


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"input": "Compute 3+4 mod 10."}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "3+4 mod 10?"}]}),
        ("/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": "3+4?"}]}),
        ("/v1/completions", {"prompt": "3+4 mod 10 is"}),
    ],
)
async def test_a_generation_request_is_authorized_once(
    scripted_app: Callable[..., Any],
    testbed_tokens: Any,
    identified: list[str],
    path: str,
    body: dict[str, object],
) -> None:
    async with scripted_app(_handler(testbed_tokens), api_keys=("alice",)) as app:
        headers = {"Authorization": "Bearer alice"}
        answer = await app.client.post(path, json={"model": app.model, **body}, headers=headers)
        assert answer.status_code == 200, answer.text
        assert identified == ["alice"]


async def test_a_refused_key_is_checked_once_and_answered_in_the_apis_shape(
    scripted_app: Callable[..., Any], testbed_tokens: Any, identified: list[str]
) -> None:
    async with scripted_app(_handler(testbed_tokens), api_keys=("alice",)) as app:
        body = {"model": app.model, "max_tokens": 8, "messages": []}
        refused = await app.client.post("/v1/messages", json=body)
        assert refused.status_code == 401
        assert refused.json()["type"] == "error"  # Anthropic's envelope
        assert identified == [""]
        page = await app.client.get("/ui")
        assert page.status_code == 401 and page.headers["www-authenticate"].startswith("Basic")
        assert (await app.client.get("/health")).status_code == 200


def test_every_route_behind_the_keys_declares_the_dependency(
    tmp_path: Any, testbed_tokens: Any
) -> None:
    engine = ScriptedEngine(_handler(testbed_tokens), tokens=testbed_tokens)
    settings = Settings(reward_model="none", prm_model="none", state_dir=str(tmp_path))
    app = create_app(settings, engine=engine)
    routes = [r for r in app.routes if isinstance(r, APIRoute)]
    guarded = {
        r.path for r in routes if any(d.call is authorized for d in r.dependant.dependencies)
    }
    paths = {r.path for r in routes}
    assert {p for p in paths if p.startswith(("/v1/", "/ui"))} <= guarded
    assert paths >= OPEN and not OPEN & guarded


def test_the_tenant_is_read_only_where_the_dependency_ran() -> None:
    request = Request({"type": "http", "method": "GET", "path": "/v1/models", "headers": []})
    with pytest.raises(RuntimeError, match="lacks the dependency"):
        tenant_of(request)
