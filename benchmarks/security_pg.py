"""The stored-responses line of ``thinkgate bench security``: two gateways on one
PostgreSQL (``--batch-store postgresql://...``, where stored responses live too), one
vLLM server behind both (``thinkgate replica``, as ``thinkgate bench batches`` runs
them), each gateway with the same keys file. ``responses`` responses are stored through
one gateway and each continued through the other (``previous_response_id``): every
continuation must be a 200 whose prompt holds the first turn (more input tokens than the
first alone), and another tenant's key must not read the stored one on the other gateway.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx

from benchmarks.batches import _gateway, _replica
from benchmarks.postgres import postgres_server
from benchmarks.security_probes import MODEL, Line, bearer


def _turns(one: str, two: str, key: str, other: str, count: int) -> tuple[int, int, list[str]]:
    continued = leaked = 0
    wrong: list[str] = []
    with httpx.Client(timeout=120) as client:
        for i in range(count):
            first = client.post(
                f"{one}/v1/responses",
                headers=bearer(key),
                json={
                    "model": MODEL,
                    "input": f"Compute {i % 10}+1 mod 10.",
                    "max_output_tokens": 8,
                },
            )
            if first.status_code != 200:
                wrong.append(f"store {first.status_code} {first.text[:100]}")
                continue
            rid = first.json()["id"]
            second = client.post(
                f"{two}/v1/responses",
                headers=bearer(key),
                json={
                    "model": MODEL,
                    "input": "And plus 2?",
                    "previous_response_id": rid,
                    "max_output_tokens": 8,
                },
            )
            # The first turn is in the second's prompt: more input tokens than it alone.
            grew = second.status_code == 200 and _input_tokens(second) > _input_tokens(first)
            if grew:
                continued += 1
            else:
                wrong.append(f"continue {second.status_code} {second.text[:100]}")
            if client.get(f"{two}/v1/responses/{rid}", headers=bearer(other)).status_code < 400:
                leaked += 1
    return continued, leaked, wrong


def two_gateways(keys: Path, key: str, other: str, *, responses: int) -> Line:
    with ExitStack() as stack:
        upstream = stack.enter_context(_replica())
        pg = stack.enter_context(postgres_server())
        flags = ("--batch-store", pg, "--keys-file", str(keys))
        one, _ = stack.enter_context(_gateway("security-1", upstream, *flags))
        two, _ = stack.enter_context(_gateway("security-2", upstream, *flags))
        continued, leaked, wrong = _turns(one, two, key, other, responses)
    failures = responses - continued + leaked
    detail = (
        f"stored on one gateway, continued on the other: {continued} of {responses}; "
        f"another tenant read {leaked} of them" + (f"; e.g. {wrong[0]}" if wrong else "")
    )
    return Line(
        "stored responses, two gateways on one PostgreSQL",
        responses,
        failures,
        f"{responses} of {responses} continued",
        failures == 0,
        detail,
    )


def _input_tokens(r: httpx.Response) -> int:
    return int(r.json()["usage"]["input_tokens"])
