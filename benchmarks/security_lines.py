"""The background-lines line of ``thinkgate bench security``: fuzzed JSONL lines sent as
PETS jobs (``POST /v1/pets/batches``) and as Batch API allocation batches (a file, then
``POST /v1/batches`` with ``allocation``).

Each try is a three-line file whose second line is fuzzed (seeded): garbage bytes, cut
JSON, a missing or retyped key, a body field set to a value of any JSON type, bad
messages, a duplicate ``custom_id``, a per-line plan the batch forbids. Goals: no 5xx,
and every refusal names the line (``line 2``) and the field the fuzz changed, in its
message or ``param`` (a failed batch's ``errors`` entry for line 2 counts). A try the
server accepts (the fuzz left the line valid) is cancelled at once.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.security_probes import Line, bearer, chat_line, upload

BODY_FIELDS = (
    "messages",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "seed",
    "model",
    "stream",
    "n",
    "logprobs",
    "stop",
    "response_format",
    "tools",
    "strategy",
    "budget",
    "reasoning_effort",
    "zzz_unknown",
)
ALLOCATION = {"method": "pets", "total_budget": 3}


@dataclass(frozen=True)
class Fuzzed:
    raw: bytes
    field: str | None  # the key the fuzz changed (None: the line is not JSON at all)


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, -(2**63), 10**30, 7])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e308, -3.5, float("nan"), float("inf")])
    if kind == 4:
        return "".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(rng.randrange(0, 12)))
    if kind == 5:
        return rng.choice(["", "user", "x" * 5000, "\u0000", "1e999"])
    if kind in (6, 7):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    return {rng.choice(["role", "content", "a", ""]): _value(rng, depth + 1) for _ in range(2)}


def fuzz_line(rng: random.Random) -> Fuzzed:
    """One fuzzed second line (``custom_id`` q2)."""
    doc: dict[str, Any] = chat_line("q2")
    body: dict[str, Any] = doc["body"]
    kind = rng.randrange(10)
    if kind == 0:
        noise = bytes(b for b in rng.randbytes(rng.randrange(1, 64)) if b not in b"\r\n")
        return Fuzzed(noise or b"{", None)
    if kind == 1:
        text = json.dumps(doc)
        return Fuzzed(text[: rng.randrange(1, len(text) - 1)].encode(), None)
    if kind == 2:
        return Fuzzed(json.dumps(_value(rng), allow_nan=True).encode(), None)
    if kind == 3:
        name = rng.choice(["custom_id", "body", "messages"])
        (body if name == "messages" else doc).pop(name)
        return Fuzzed(json.dumps(doc).encode(), name)
    if kind == 4:
        name = rng.choice(["custom_id", "body"])
        doc[name] = _value(rng)
        return _dumped(doc, name)
    if kind == 5:
        body["messages"] = rng.choice(
            [[], [{"role": _value(rng)}], [{"role": "user", "content": _value(rng)}], [1, 2]]
        )
        return _dumped(doc, "messages")
    if kind == 6:
        doc["custom_id"] = "q1"
        return Fuzzed(json.dumps(doc).encode(), "custom_id")
    name = rng.choice(BODY_FIELDS)
    body[name] = _value(rng)
    return _dumped(doc, name)


def _dumped(doc: dict[str, Any], name: str) -> Fuzzed:
    """``doc`` as a line; a NaN or an infinity in it makes it no JSON at all (Python writes
    ``NaN``, which JSON has not), so no field can be named."""
    try:
        return Fuzzed(json.dumps(doc, allow_nan=False).encode(), name)
    except ValueError:
        return Fuzzed(json.dumps(doc, allow_nan=True).encode(), None)


@dataclass
class _Tally:
    tries: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    unnamed: list[str] = field(default_factory=list)  # refusals naming no line or field
    server_errors: list[str] = field(default_factory=list)
    accepted: int = 0


def _names(text: str, fuzzed: Fuzzed) -> bool:
    return "line 2" in text and (fuzzed.field is None or fuzzed.field in text)


def _file(fuzzed: Fuzzed) -> bytes:
    first = json.dumps(chat_line("q1")).encode()
    third = json.dumps(chat_line("q3")).encode()
    return b"\n".join((first, fuzzed.raw, third)) + b"\n"


def _send(client: httpx.Client, key: str, fuzzed: Fuzzed, route: str) -> httpx.Response:
    """One try, sent again while it is a 429 (a tenant's running jobs are capped)."""
    for _ in range(60):
        if route == "pets":
            r = client.post(
                "/v1/pets/batches",
                params={"total_budget": 3},
                headers={**bearer(key), "Content-Type": "application/jsonl"},
                content=_file(fuzzed),
            )
        else:
            up = upload(client, key, _file(fuzzed))
            if up.status_code != 200:
                return up
            create = {
                "input_file_id": up.json()["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                "allocation": ALLOCATION,
            }
            r = client.post("/v1/batches", headers=bearer(key), json=create)
        if r.status_code != 429:
            return r
        time.sleep(float(r.headers.get("retry-after", "1")))
    return r


def _judge(client: httpx.Client, key: str, fuzzed: Fuzzed, route: str, tally: _Tally) -> None:
    r = _send(client, key, fuzzed, route)
    tally.tries += 1
    tally.statuses[str(r.status_code)] += 1
    shown = f"{route} {r.status_code} {r.text[:1600]!r} for {fuzzed.raw[:400]!r} ({fuzzed.field})"
    if r.status_code >= 500:
        tally.server_errors.append(shown)
        return
    if r.status_code >= 400:
        try:
            error = r.json()["error"]
            text = f"{error.get('message')} {error.get('param')}"
        except (ValueError, KeyError, TypeError):
            text = r.text
        if not _names(text, fuzzed):
            tally.unnamed.append(shown)
        return
    answer = r.json()
    errors = (answer.get("errors") or {}).get("data") or []
    if answer.get("status") == "failed":
        mine = [json.dumps(e) for e in errors if e.get("line") == 2]
        if not any(fuzzed.field is None or fuzzed.field in e for e in mine):
            tally.unnamed.append(shown)
        return
    tally.accepted += 1
    path = "/v1/pets/batches" if route == "pets" else "/v1/batches"
    client.post(f"{path}/{answer['id']}/cancel", headers=bearer(key))


def fuzzed_lines(url: str, key: str, *, lines: int, seed: int) -> Line:
    """``lines`` tries, half as PETS jobs and half as allocation batches."""
    rng = random.Random(seed)
    tally = _Tally()
    with httpx.Client(base_url=url, timeout=120) as client:
        for i in range(lines):
            _judge(client, key, fuzz_line(rng), "pets" if i % 2 == 0 else "allocation", tally)
    failures = len(tally.server_errors) + len(tally.unnamed)
    statuses = ", ".join(f"{n}x{s}" for s, n in sorted(tally.statuses.items()))
    examples = (tally.server_errors + tally.unnamed)[:2]
    detail = (
        f"PETS and allocation batches, half each: {statuses}; {tally.accepted} valid (cancelled); "
        f"5xx {len(tally.server_errors)}, refusals not naming line and field {len(tally.unnamed)}"
        + (f"; e.g. {' | '.join(examples)}" if examples else "")
    )
    goal = "0 5xx; each 4xx names line and field"
    return Line("fuzzed background lines", tally.tries, failures, goal, failures == 0, detail)
