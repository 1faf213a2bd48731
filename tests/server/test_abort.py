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


def _statuses(live_server: Any, status: str) -> float:
    """``thinkgate_requests_total`` summed over routes and strategies for ``status``."""
    metrics: dict[str, float] = live_server.metrics()
    return sum(
        v
        for k, v in metrics.items()
        if k.startswith("thinkgate_requests_total{") and f'status="{status}"' in k
    )


def test_disconnect_while_waiting_for_json_aborts(live_server: Any, served_model: str) -> None:
    before = live_server.metrics().get(ABORTED, 0.0)
    gone_before = _statuses(live_server, "499")
    url = f"{live_server.base_url}/v1/chat/completions"
    live_server.post_and_leave("/v1/chat/completions", _long_body(served_model))
    _settled(live_server, before)
    # Counted like a stream that loses its client: status 499 (it was left out before).
    assert _statuses(live_server, "499") == gone_before + 1
    # The server is fine afterwards.
    ok = httpx.post(url, json=_long_body(served_model, n=1, max_tokens=5), timeout=60)
    assert ok.status_code == 200


def test_a_reused_request_id_cannot_abort_another_clients_request(
    live_server: Any, served_model: str
) -> None:
    """X-Request-Id is the client's label, not the engine's id: a second request with the
    same id that disconnects must not abort the first.

    Both are streams, so "in the engine" is known from their first bytes, not from
    /metrics (which a busy event loop may answer late)."""
    import threading

    url = f"{live_server.base_url}/v1/chat/completions"
    headers = {"X-Request-Id": "shared-id-123"}
    started = threading.Event()
    reasons: list[str] = []

    def run_first() -> None:
        body = _long_body(served_model, n=16, max_tokens=460, stream=True)
        with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as r:
            assert r.status_code == 200 and r.headers["X-Request-Id"] == "shared-id-123"
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    started.set()
                    chunk = orjson.loads(line[6:])
                    reasons.extend(
                        c["finish_reason"] for c in chunk["choices"] if c["finish_reason"]
                    )

    thread = threading.Thread(target=run_first)
    thread.start()
    assert started.wait(60), "the first request never started"
    before = live_server.metrics().get(ABORTED, 0.0)
    host, port = live_server.base_url.removeprefix("http://").split(":")
    payload = orjson.dumps(_long_body(served_model, stream=True))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: shared-id-123\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head + payload)
        seen = b""
        while b"data: {" not in seen:  # its first tokens: it is in the engine now
            data = sock.recv(4096)
            assert data, "the second request ended before streaming"
            seen += data
    # Closed: the second request is aborted; the first must run to max_tokens.
    thread.join(timeout=120)
    assert reasons == ["length"] * 16, reasons
    deadline = time.monotonic() + 20
    while live_server.metrics().get(ABORTED, 0.0) <= before:
        assert time.monotonic() < deadline, "the second request was never aborted"
        time.sleep(0.1)


def test_a_client_gone_before_its_body_arrived_is_a_499_not_a_500(
    live_server: Any, served_model: str
) -> None:
    errors_before = _statuses(live_server, "500")
    gone_before = _statuses(live_server, "499")
    host, port = live_server.base_url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        "Content-Type: application/json\r\nContent-Length: 2000\r\n\r\n"
    ).encode()
    for _ in range(3):
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + b'{"model": ')  # 10 of the 2,000 bytes announced, then gone
            time.sleep(0.2)
    deadline = time.monotonic() + 20
    while _statuses(live_server, "499") < gone_before + 3:
        assert time.monotonic() < deadline, "the server never noticed the clients left"
        time.sleep(0.1)
    assert _statuses(live_server, "500") == errors_before
    ok = httpx.post(
        f"{live_server.base_url}/v1/chat/completions",
        json=_long_body(served_model, n=1, max_tokens=5),
        timeout=60,
    )
    assert ok.status_code == 200
