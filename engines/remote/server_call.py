"""One generation call on one vLLM server: its body and headers, its answer read or its
stream parsed, and how it failed (``UpstreamFailed``: another server may serve it).

``RemoteEngine`` places, leases and retries; these functions only talk to the server
they are given (``generate_on``, ``joint_on``, ``stream_on``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any, Final

import orjson

from core.engine import GenerateRequest, Sample, SampleDelta
from core.errors import BackendUnavailable, GatewayError, InvalidRequest, UpstreamError
from engines.calls import CallFailed, Calls
from engines.http_errors import transport_error
from engines.remote import joint
from engines.remote.upstream import Upstream
from engines.remote.wire import PATHS, Protocol, body, deltas, samples, upstream_error

AFFINITY_HEADER: Final = "X-Session-ID"
FAIRNESS_HEADER: Final = "x-llm-d-inference-fairness-id"
OBJECTIVE_HEADER: Final = "x-llm-d-inference-objective"


class UpstreamFailed(Exception):
    """A call failed on one server in a way another server may not (retry elsewhere)."""

    def __init__(self, error: GatewayError, *, eject: bool) -> None:
        super().__init__(error.message)
        self.error = error
        self.eject = eject


async def generate_on(calls: Calls, up: Upstream, request: GenerateRequest) -> list[Sample]:
    """``request``'s samples from ``up``, not streamed."""
    assert up.facts is not None
    payload = _body(up, request, stream=False)
    data = await _post(calls, up, up.facts.protocol, payload, request)
    s = request.sampling
    return samples(
        up.facts.protocol,
        data,
        s.n,
        top_k=s.top_logprobs,
        client_k=s.token_logprobs,
        prompt=(
            None if s.prompt_logprobs is None else (s.prompt_logprobs, request.prompt_token_ids)
        ),
    )


async def joint_on(
    calls: Calls, up: Upstream, lead: GenerateRequest, call: joint.JointCall
) -> list[list[Sample]]:
    """The samples of every prompt of ``call`` (one ``/v1/completions`` call), per prompt."""
    # The body of the longest prompt checks that every prompt fits the context.
    longest = replace(
        lead,
        prompt_token_ids=max(call.prompts, key=len),
        sampling=replace(lead.sampling, n=call.n),
    )
    payload = _body(up, longest, stream=False, protocol="completions")
    payload["prompt"] = [list(p) for p in call.prompts]
    data = await _post(calls, up, "completions", payload, lead)
    s = lead.sampling
    got = samples(
        "completions", data, call.samples, top_k=s.top_logprobs, client_k=s.token_logprobs
    )
    return call.split(got)


async def stream_on(
    calls: Calls, up: Upstream, request: GenerateRequest
) -> AsyncGenerator[SampleDelta, None]:
    """``request``'s deltas from ``up``; ``UpstreamFailed`` when the stream ends before
    every sample finished."""
    assert up.facts is not None
    protocol = up.facts.protocol
    payload = _body(up, request, stream=True)
    finished: set[int] = set()
    try:
        async with calls.stream(
            f"{up.url}{PATHS[protocol]}", orjson.dumps(payload), _headers(request)
        ) as answer:
            if answer.status != 200:
                raw = await answer.read()
                _raise_for_status(up, answer.status, _loads(raw))
            async for line in answer.lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                frame = _loads(data.encode())
                if frame.get("error") is not None:
                    failure = upstream_error(500, frame)
                    if isinstance(failure, InvalidRequest):
                        raise failure  # the request's fault: no server would take it
                    raise UpstreamFailed(failure, eject=False)
                for delta in deltas(
                    protocol,
                    frame,
                    top_k=request.sampling.top_logprobs,
                    client_k=request.sampling.token_logprobs,
                ):
                    if delta.finish_reason is not None:
                        finished.add(delta.index)
                    yield delta
    except CallFailed as exc:
        raise _transport_failure(up, exc) from exc
    if len(finished) != request.sampling.n:
        raise UpstreamFailed(
            UpstreamError(
                f"vLLM server {up.url} ended the stream with {len(finished)} of "
                f"{request.sampling.n} samples finished"
            ),
            eject=False,
        )


def _body(
    up: Upstream,
    request: GenerateRequest,
    *,
    stream: bool,
    protocol: Protocol | None = None,
) -> dict[str, Any]:
    assert up.facts is not None
    room = up.facts.max_model_len - len(request.prompt_token_ids)
    if room < 1:
        raise InvalidRequest(
            f"the prompt has {len(request.prompt_token_ids)} tokens; the model's context "
            f"is {up.facts.max_model_len}"
        )
    max_tokens = room if request.sampling.max_tokens is None else request.sampling.max_tokens
    return body(
        protocol or up.facts.protocol,
        request,
        max_tokens=max_tokens,
        upstream_model=up.facts.model_id,
        stream=stream,
    )


async def _post(
    calls: Calls,
    up: Upstream,
    protocol: Protocol,
    payload: dict[str, Any],
    request: GenerateRequest,
) -> dict[str, Any]:
    """A non-streamed call's answer, read as JSON; raises for a failed status."""
    try:
        answer = await calls.post(
            f"{up.url}{PATHS[protocol]}", orjson.dumps(payload), _headers(request)
        )
        data = orjson.loads(answer.content) if answer.content else {}
    except (CallFailed, ValueError) as exc:
        raise _transport_failure(up, exc) from exc
    _raise_for_status(up, answer.status, data)
    return data


def _headers(request: GenerateRequest) -> dict[str, str]:
    """A call's headers: with its affinity key as the session key a router places by
    (vLLM's router: the first of ``X-Session-ID``, ``X-User-ID``... is its
    ``consistent_hash`` / ``sticky_least_loaded`` key; otherwise it hashes the prompt)."""
    headers = {"content-type": "application/json"}
    if request.affinity:
        headers[AFFINITY_HEADER] = request.affinity
    if request.tenant:
        # llm-d's endpoint picker weighs requests by tenant: all samples of one request
        # carry their tenant's id, so a 16-sample request is one tenant, not 16.
        headers[FAIRNESS_HEADER] = request.tenant
    if request.objective:
        # Its objective (an InferenceObjective's name): interactive calls before batch.
        headers[OBJECTIVE_HEADER] = request.objective
    return headers


def _loads(raw: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        return {"error": {"message": raw[:300].decode(errors="replace")}}
    return value if isinstance(value, dict) else {"data": value}


def _raise_for_status(up: Upstream, status: int, data: dict[str, Any]) -> None:
    if status == 200:
        return
    error = upstream_error(status, data)
    if isinstance(error, InvalidRequest):
        raise error  # the request's fault (whatever the status): no other server would take it
    if status >= 500 or status == 429:
        # The server (not the request) failed: another server may serve it. A 503 is
        # vLLM's dead engine: take the server out until it verifies again.
        raise UpstreamFailed(error, eject=status == 503)
    raise error


def _transport_failure(up: Upstream, exc: Exception) -> UpstreamFailed:
    """A connection that could not open or broke, or an answer that is not JSON: the
    server is gone or going (503, ejected), whatever the wire error's own status."""
    source = f"vLLM server {up.url}"
    if isinstance(exc, CallFailed):
        message = transport_error(source, exc).message
    else:
        message = f"{source} answered with invalid JSON: {exc}"
    return UpstreamFailed(BackendUnavailable(message), eject=True)
