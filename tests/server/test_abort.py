"""A client that goes away aborts every engine request of its call (live server)."""

from __future__ import annotations

import socket
import time
from typing import Any

import httpx
import orjson
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.engines("local", "remote")]

ABORTED = 'thinkgate_aborted_requests_total{reason="client_disconnect"}'
UNFINISHED = "thinkgate_engine_unfinished_requests"
INFLIGHT = "thinkgate_inflight_requests"


def _long_body(model: str, **extra: Any) -> dict[str, Any]:
    # ignore_eos keeps every sample going to max_tokens, so the request is surely
    # still running when the client leaves.
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Compute 1+2+3 mod 10."}],
        "n": 16,
        "max_tokens": 460,
        "ignore_eos": True,
        "temperature": 1.0,
        **extra,
    }


def _settled(live_server: Any, before: float) -> dict[str, float]:
    deadline = time.monotonic() + 20
    while True:
        m: dict[str, float] = live_server.metrics()
        if m.get(ABORTED, 0) > before and m[UNFINISHED] == 0 and m[INFLIGHT] == 0:
            return m
        if time.monotonic() > deadline:
            pytest.fail(
                f"not aborted: {ABORTED}={m.get(ABORTED)} {UNFINISHED}={m[UNFINISHED]} "
                f"{INFLIGHT}={m[INFLIGHT]}"
            )
        time.sleep(0.2)


def test_disconnect_mid_stream_aborts(live_server: Any, served_model: str) -> None:
    before = live_server.metrics().get(ABORTED, 0.0)
    url = f"{live_server.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=_long_body(served_model, stream=True), timeout=60) as r:
        assert r.status_code == 200
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                seen += 1
            if seen >= 5:
                break
    _settled(live_server, before)


def test_disconnect_while_waiting_for_json_aborts(live_server: Any, served_model: str) -> None:
    before = live_server.metrics().get(ABORTED, 0.0)
    url = f"{live_server.base_url}/v1/chat/completions"
    live_server.post_and_leave("/v1/chat/completions", _long_body(served_model))
    _settled(live_server, before)
    # The server is fine afterwards.
    ok = httpx.post(url, json=_long_body(served_model, n=1, max_tokens=5), timeout=60)
    assert ok.status_code == 200


def test_a_reused_request_id_cannot_abort_another_clients_request(
    live_server: Any, served_model: str
) -> None:
    """X-Request-Id is the client's label, not the engine's id: a second request with the
    same id that disconnects must not abort the first."""
    import threading

    url = f"{live_server.base_url}/v1/chat/completions"
    headers = {"X-Request-Id": "shared-id-123"}
    first: dict[str, Any] = {}

    def run_first() -> None:
        body = _long_body(served_model, n=1, max_tokens=300)
        first["reply"] = httpx.post(url, json=body, headers=headers, timeout=120)

    thread = threading.Thread(target=run_first)
    thread.start()
    deadline = time.monotonic() + 30
    while live_server.metrics().get(INFLIGHT, 0) < 1:
        assert time.monotonic() < deadline, "the first request never started"
        time.sleep(0.02)
    before = live_server.metrics().get(ABORTED, 0.0)
    host, port = live_server.base_url.removeprefix("http://").split(":")
    payload = orjson.dumps(_long_body(served_model))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: shared-id-123\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + payload)
        # Leave once both requests are in the engine (the old bug aborted the first then).
        while live_server.metrics().get(UNFINISHED, 0) < 2:
            assert time.monotonic() < deadline + 30, "the second request never reached the engine"
            time.sleep(0.02)
    _settled_after(live_server, before)
    thread.join(timeout=120)
    reply = first["reply"]
    assert reply.status_code == 200, reply.text
    assert reply.headers["X-Request-Id"] == "shared-id-123"
    assert reply.json()["choices"][0]["finish_reason"] == "length"  # ran to max_tokens


def _settled_after(live_server: Any, before: float) -> None:
    deadline = time.monotonic() + 20
    while live_server.metrics().get(ABORTED, 0.0) <= before:
        assert time.monotonic() < deadline, "the second request was never aborted"
        time.sleep(0.1)
