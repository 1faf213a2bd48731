"""The request-level lines of ``thinkgate bench security``: reads without a key, another
tenant's ids, cross-origin and DNS-rebinding requests, and non-JSON bodies.

Each probe counts its tries and its failures (a request that got what it must not: a
2xx, or any status but the one the goal names); ``Line`` is one row of the pack's table.
The probes take a running server's URL and two tenants' keys; ``Owned`` is what tenant A
made first (a file, a batch, a stored response, a PETS job) for B and the keyless to try.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

MODEL = "testbed-base"
EVIL_ORIGINS = ("https://evil.example", "null")
LISTS = ("/v1/files", "/v1/batches", "/v1/pets/batches")  # a 200 that must not show A's ids
EVIL_HOSTS = ("evil.example", "rebind.attacker.example:8000")


@dataclass(frozen=True)
class Line:
    """One row: ``failures`` of ``tries`` missed ``goal``; ``met`` is the verdict (for a
    measured ratio, whether it is within its bound)."""

    name: str
    tries: int
    failures: int
    goal: str
    met: bool
    detail: str = ""


@dataclass(frozen=True)
class Owned:
    """Ids tenant A made: what the other probes reach for."""

    file_id: str
    batch_id: str
    response_id: str
    job_id: str


def line_of(name: str, tries: int, failures: int, goal: str, detail: str = "") -> Line:
    return Line(name, tries, failures, goal, tries > 0 and failures == 0, detail)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat_line(
    custom_id: str, prompt: str = "Compute 3+4 mod 10.", **body: object
) -> dict[str, object]:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8,
            **body,
        },
    }


def jsonl(*docs: object) -> bytes:
    return b"".join(json.dumps(d).encode() + b"\n" for d in docs)


def upload(client: httpx.Client, key: str, content: bytes) -> httpx.Response:
    files = {"file": ("lines.jsonl", content, "application/octet-stream")}
    return client.post("/v1/files", headers=bearer(key), files=files, data={"purpose": "batch"})


def make_owned(client: httpx.Client, key: str) -> Owned:
    """A file, a one-line batch, a stored response and a PETS job, all tenant A's."""
    up = upload(client, key, jsonl(chat_line("q1")))
    up.raise_for_status()
    file_id = up.json()["id"]
    batch = client.post(
        "/v1/batches",
        headers=bearer(key),
        json={
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    )
    batch.raise_for_status()
    stored = client.post(
        "/v1/responses",
        headers=bearer(key),
        json={"model": MODEL, "input": "Compute 2+2 mod 10.", "max_output_tokens": 8},
    )
    stored.raise_for_status()
    job = client.post(
        "/v1/pets/batches",
        params={"total_budget": 2},
        headers={**bearer(key), "Content-Type": "application/jsonl"},
        content=jsonl(chat_line("p1")),
    )
    job.raise_for_status()
    return Owned(file_id, batch.json()["id"], stored.json()["id"], job.json()["id"])


def _reads(owned: Owned) -> list[tuple[str, str]]:
    o = owned
    return [
        ("GET", "/v1/files"),
        ("GET", f"/v1/files/{o.file_id}"),
        ("GET", f"/v1/files/{o.file_id}/content"),
        ("GET", "/v1/batches"),
        ("GET", f"/v1/batches/{o.batch_id}"),
        ("GET", f"/v1/responses/{o.response_id}"),
        ("GET", f"/v1/responses/{o.response_id}/input_items"),
        ("GET", "/v1/pets/batches"),
        ("GET", f"/v1/pets/batches/{o.job_id}"),
        ("GET", f"/v1/pets/batches/{o.job_id}/output"),
        ("GET", "/metrics"),
    ]


def unauthenticated(client: httpx.Client, owned: Owned, key: str) -> Line:
    """Every read of files, batches, stored responses, jobs and metrics with no key, a
    wrong bearer key, HTTP Basic with a wrong password and a wrong ``x-api-key``."""
    basic = base64.b64encode(b"user:not-the-key").decode()
    ways: Sequence[dict[str, str]] = (
        {},
        {"Authorization": "Bearer tg-not-a-key"},
        {"Authorization": f"Basic {basic}"},
        {"x-api-key": "tg-not-a-key"},
        {"Authorization": f"Bearer {key}x"},  # one character past a real key
    )
    tries = failures = 0
    leaked: list[str] = []
    for method, path in _reads(owned):
        for headers in ways:
            tries += 1
            r = client.request(method, path, headers=headers)
            if r.status_code < 400:
                failures += 1
                leaked.append(f"{method} {path} {r.status_code}")
    control = client.get(f"/v1/files/{owned.file_id}", headers=bearer(key)).status_code
    detail = f"{len(ways)} ways x {tries // len(ways)} routes; with A's key: {control}"
    return line_of(
        "unauthenticated reads (keys set)", tries, failures, "0 succeed", _more(detail, leaked)
    )


def cross_tenant(client: httpx.Client, owned: Owned, key: str, other_key: str) -> Line:
    """Tenant B's key on tenant A's ids: every read, the deletes and cancels, a
    continuation of A's stored response, and B's lists (A's ids must not be in them)."""
    o, h = owned, bearer(other_key)
    probes: list[tuple[str, str, dict[str, object] | None]] = [
        *((m, p, None) for m, p in _reads(owned) if p != "/metrics"),
        ("GET", f"/v1/pets/batches/{o.job_id}/events", None),
        ("POST", f"/v1/batches/{o.batch_id}/cancel", None),
        ("POST", f"/v1/pets/batches/{o.job_id}/cancel", None),
        (
            "POST",
            "/v1/responses",
            {
                "model": MODEL,
                "input": "and?",
                "max_output_tokens": 4,
                "previous_response_id": o.response_id,
            },
        ),
        ("DELETE", f"/v1/responses/{o.response_id}", None),
        ("DELETE", f"/v1/files/{o.file_id}", None),
    ]
    ids = (o.file_id, o.batch_id, o.job_id, o.response_id)
    tries = failures = 0
    leaked: list[str] = []
    for method, path, body in probes:
        tries += 1
        r = client.request(method, path, headers=h, json=body)
        listing = method == "GET" and path in LISTS
        seen = listing and r.status_code == 200 and any(i in r.text for i in ids)
        if seen or (not listing and r.status_code < 400):
            failures += 1
            leaked.append(f"{method} {path} {r.status_code}")
    still = client.get(f"/v1/files/{o.file_id}", headers=bearer(key)).status_code
    detail = f"{tries} requests with B's key; A's file afterwards with A's key: {still}"
    return line_of("another tenant's ids", tries, failures, "0 succeed", _more(detail, leaked))


def _state_changing(owned: Owned) -> list[tuple[str, str, dict[str, object] | None]]:
    o = owned
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    create: dict[str, object] = {
        "input_file_id": o.file_id,
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    return [
        ("POST", "/v1/chat/completions", chat),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4}),
        ("POST", "/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 4}),
        ("POST", "/v1/batches", create),
        ("POST", f"/v1/batches/{o.batch_id}/cancel", None),
        ("POST", f"/v1/pets/batches/{o.job_id}/cancel", None),
        ("DELETE", f"/v1/responses/{o.response_id}", None),
        ("DELETE", f"/v1/files/{o.file_id}", None),
        ("GET", "/ui", None),
        ("GET", "/ui/config.json", None),
    ]


def cross_origin(client: httpx.Client, owned: Owned, key: str) -> Line:
    """A's own key from a foreign page's ``Origin``: state-changing routes and the live
    view. An upload from a foreign origin is tried too."""
    tries = failures = 0
    leaked: list[str] = []
    for origin in EVIL_ORIGINS:
        headers = {**bearer(key), "Origin": origin}
        for method, path, body in _state_changing(owned):
            tries += 1
            r = client.request(method, path, headers=headers, json=body)
            failures += int(r.status_code < 400)
            if r.status_code != 403:  # refused another way, or not refused: shown
                leaked.append(f"{origin} {method} {path} {r.status_code}")
        tries += 1
        files = {"file": ("x.jsonl", jsonl(chat_line("o1")), "application/octet-stream")}
        r = client.post("/v1/files", headers=headers, files=files, data={"purpose": "batch"})
        if r.status_code < 400:
            failures += 1
            leaked.append(f"{origin} POST /v1/files {r.status_code}")
    control = client.get("/ui", headers=bearer(key)).status_code
    detail = f"{len(EVIL_ORIGINS)} origins; /ui with the key and no Origin: {control}"
    return line_of(
        "cross-origin (bad Origin)", tries, failures, "0 succeed (403)", _more(detail, leaked)
    )


def foreign_host(client: httpx.Client, owned: Owned, key: str) -> Line:
    """DNS rebinding: A's key, the request sent to the server's address but naming a
    foreign ``Host``."""
    tries = failures = 0
    leaked: list[str] = []
    reads = [("GET", "/v1/models", None), ("GET", "/v1/files", None), ("GET", "/metrics", None)]
    for host in EVIL_HOSTS:
        for method, path, body in reads + _state_changing(owned)[:1] + [("GET", "/ui", None)]:
            tries += 1
            r = client.request(method, path, headers={**bearer(key), "Host": host}, json=body)
            if r.status_code < 400:
                failures += 1
                leaked.append(f"{host} {method} {path} {r.status_code}")
    detail = f"Host {', '.join(EVIL_HOSTS)}"
    return line_of(
        "DNS rebinding (foreign Host)", tries, failures, "0 succeed (400)", _more(detail, leaked)
    )


def non_json(client: httpx.Client, key: str) -> Line:
    """A JSON body sent as ``text/plain`` (and the other types a page may send without a
    preflight, and none) to every JSON route: each must be a 415."""
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    routes: list[tuple[str, dict[str, object]]] = [
        ("/v1/chat/completions", chat),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4}),
        ("/v1/responses", {"model": MODEL, "input": "hi"}),
        (
            "/v1/messages",
            {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        ),
        (
            "/v1/messages/count_tokens",
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        ),
        ("/v1/responses/input_tokens", {"model": MODEL, "input": "hi"}),
        (
            "/v1/batches",
            {
                "input_file_id": "file-x",
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            },
        ),
    ]
    types = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None)
    tries = failures = 0
    wrong: list[str] = []
    for path, body in routes:
        for kind in types:
            headers = bearer(key) | ({"Content-Type": kind} if kind else {})
            tries += 1
            r = client.post(path, headers=headers, content=json.dumps(body).encode())
            if r.status_code != 415:
                failures += 1
                wrong.append(f"{kind} {path} {r.status_code}")
    detail = f"{len(routes)} routes x {len(types)} types (text/plain, form, multipart, none)"
    return line_of(
        "text/plain POST to a JSON route", tries, failures, "415 each", _more(detail, wrong)
    )


def _more(detail: str, examples: list[str]) -> str:
    return detail if not examples else f"{detail}; e.g. {'; '.join(examples[:3])}"
