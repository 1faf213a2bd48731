"""No open door: an off-loopback bind without keys refuses to start; a ``Host`` the server
does not serve (DNS rebinding) is a 400; a page on another origin cannot drive a
state-changing route or the live view (403); a JSON route's body sent as a type a page
may send without asking (``text/plain``, a form) is a 415; Anthropic's ``x-api-key``
counts as a key. Real handlers over the app of ``thinkgate serve`` (scripted engine)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.settings import Settings
from server.tenancy.exposure import allowed_hosts, open_door

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "3+4=7\n</think>\\boxed{7}"
CHAT = "/v1/chat/completions"


def _handler(tokens: Any) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *[ANSWER] * request.sampling.n)

    return handler


@pytest.mark.parametrize(
    ("settings", "refused"),
    [
        ({"host": "127.0.0.1"}, False),
        ({"host": "::1"}, False),
        ({"host": "localhost"}, False),
        ({"host": "0.0.0.0"}, True),
        ({"host": "::"}, True),
        ({"host": "10.1.2.3"}, True),
        ({"host": "0.0.0.0", "api_keys": "k"}, False),
        ({"host": "0.0.0.0", "keys_file": "/etc/thinkgate/keys.toml"}, False),
        ({"host": "0.0.0.0", "allow_unauthenticated_network": True}, False),
    ],
)
def test_an_open_door_is_refused_unless_asked_for(settings: dict[str, Any], refused: bool) -> None:
    why = open_door(Settings(**settings))
    assert (why is not None) == refused
    if why:
        assert "--allow-unauthenticated-network" in why and "--api-keys" in why


def test_the_command_refuses_to_start_on_an_open_network_bind() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--host", "0.0.0.0", "--port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "refusing to serve 0.0.0.0" in done.stderr


def test_allowed_hosts_default_to_loopback_names_on_a_loopback_bind() -> None:
    assert allowed_hosts(Settings()) == ("localhost", "127.0.0.1", "::1")
    assert allowed_hosts(Settings(host="0.0.0.0", api_keys="k")) is None
    assert allowed_hosts(Settings(allowed_hosts="api.example.com,*.corp")) == (
        "api.example.com",
        "*.corp",
    )


async def test_dns_rebinding_and_cross_origin_pages_are_refused(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    body = {"messages": [{"role": "user", "content": "Compute 3+4 mod 10."}], "max_tokens": 8}
    async with scripted_app(_handler(testbed_tokens)) as app:
        body["model"] = app.model
        rebound = await app.client.post(CHAT, json=body, headers={"Host": "evil.example:8000"})
        assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "host_not_allowed"
        port = await app.client.post(CHAT, json=body, headers={"Host": "127.0.0.1:8000"})
        assert port.status_code == 200, port.text
        elsewhere = {"Origin": "https://evil.example"}
        cross = await app.client.post(CHAT, json=body, headers=elsewhere)
        assert cross.status_code == 403 and cross.json()["error"]["code"] == "cross_origin_refused"
        assert cross.headers["x-should-retry"] == "false"
        ui = await app.client.get("/ui", headers=elsewhere)
        assert ui.status_code == 403
        same = await app.client.post(CHAT, json=body, headers={"Origin": "http://localhost"})
        assert same.status_code == 200, same.text
        read = await app.client.get("/v1/models", headers=elsewhere)
        assert read.status_code == 200  # a read: the browser keeps the answer from the page
        messages = {"model": app.model, "max_tokens": 8, "messages": body["messages"]}
        anth = await app.client.post("/v1/messages", json=messages, headers=elsewhere)
        assert anth.status_code == 403 and anth.json()["error"]["type"] == "permission_error"
    async with scripted_app(_handler(testbed_tokens), allowed_origins="https://app.example") as app:
        body["model"] = app.model
        allowed = await app.client.post(CHAT, json=body, headers={"Origin": "https://app.example"})
        assert allowed.status_code == 200, allowed.text


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
async def test_a_json_route_refuses_what_a_page_may_send_without_asking(
    scripted_app: Callable[..., Any], testbed_tokens: Any, content_type: str | None
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        raw = b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}]}' % (
            app.model.encode()
        )
        headers = {} if content_type is None else {"Content-Type": content_type}
        got = await app.client.post(CHAT, content=raw, headers=headers)
        assert got.status_code == 415, got.text
        assert got.json()["error"]["code"] == "unsupported_media_type"
        as_json = await app.client.post(
            CHAT, content=raw, headers={"Content-Type": "application/json; charset=utf-8"}
        )
        assert as_json.status_code == 200, as_json.text
        assert app.engine.calls and len(app.engine.calls) == 1


async def test_anthropics_x_api_key_is_a_key(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": "Compute 3+4 mod 10."}]}
    async with scripted_app(_handler(testbed_tokens), api_keys=("alice",)) as app:
        body["model"] = app.model
        good = await app.client.post("/v1/messages", json=body, headers={"x-api-key": "alice"})
        assert good.status_code == 200, good.text
        bad = await app.client.post("/v1/messages", json=body, headers={"x-api-key": "mallory"})
        assert bad.status_code == 401
        none = await app.client.post("/v1/messages", json=body)
        assert none.status_code == 401


async def test_metrics_are_behind_the_keys_when_there_are_keys(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    keys = {"api_keys": ("alice",), "metrics_key": "scraper"}
    async with scripted_app(_handler(testbed_tokens), **keys) as app:
        assert (await app.client.get("/metrics")).status_code == 401
        wrong = {"Authorization": "Bearer mallory"}
        assert (await app.client.get("/metrics", headers=wrong)).status_code == 401
        for key in ("alice", "scraper"):
            ok = await app.client.get("/metrics", headers={"Authorization": f"Bearer {key}"})
            assert ok.status_code == 200 and "thinkgate_" in ok.text
        # The scraper's key reads the metrics only.
        chat = {"model": app.model, "messages": [{"role": "user", "content": "1+1"}]}
        scraper = {"Authorization": "Bearer scraper"}
        assert (await app.client.post(CHAT, json=chat, headers=scraper)).status_code == 401
    async with scripted_app(_handler(testbed_tokens)) as app:  # no keys: open, as before
        assert (await app.client.get("/metrics")).status_code == 200


def test_processes_starting_together_agree_on_one_reasoning_key(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from server.apis.reasoning_seal import KEY_FILE, Seal

    for attempt in range(20):
        directory = tmp_path / f"state-{attempt}"
        with ThreadPoolExecutor(8) as pool:
            seals = list(pool.map(Seal.from_state_dir, [directory] * 8))
        sealed = seals[0].seal("a thought", "reasoning")
        assert all(s.open(sealed, "reasoning", param="p") == "a thought" for s in seals)
        assert len((directory / KEY_FILE).read_bytes()) == 32
        assert [p.name for p in directory.iterdir()] == [KEY_FILE]  # no temporary left
        assert (directory / KEY_FILE).stat().st_mode & 0o777 == 0o600
