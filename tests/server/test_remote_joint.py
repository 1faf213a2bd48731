"""``RemoteEngine.generate_batch``: requests that can share a call go to vLLM's
``/v1/completions`` as one call with every prompt (engines/remote/joint.py); servers
scripted with ``httpx.MockTransport``. Through real vLLM servers: a step search on the
remote stack (test_remote_engine.py, test_step_search_api.py)."""

from __future__ import annotations

from dataclasses import replace

import httpx
import orjson
import pytest

from core import errors as tree
from core.engine import GenerateRequest, SamplingConfig
from engines.remote import joint
from tests.server.test_remote_failover import A, B, engine, host


def request(i: int, n: int = 2, **changes: object) -> GenerateRequest:
    sampling = replace(SamplingConfig(n=n, max_tokens=4, stop_token_ids=(9,)), **changes)  # type: ignore[arg-type]
    return GenerateRequest(
        request_id=f"r-{i}",
        prompt_token_ids=tuple(range(10, 20 + i)),
        sampling=sampling,
        affinity="client-1",
    )


def completions(r: httpx.Request) -> httpx.Response:
    """vLLM's answer to a list of prompts: prompt ``i``'s samples at ``i * n + j``,
    each sample's ids naming its prompt's length and its own index."""
    body = orjson.loads(r.content)
    n = body["n"]
    choices = [
        {
            "index": i * n + j,
            "token_ids": [len(prompt), j],
            "finish_reason": "stop",
            "text": "",
        }
        for i, prompt in enumerate(body["prompt"])
        for j in range(n)
    ]
    return httpx.Response(200, json={"choices": choices})


def generate(r: httpx.Request) -> httpx.Response:
    n = orjson.loads(r.content)["sampling_params"]["n"]
    choices = [{"index": j, "token_ids": [0, j], "finish_reason": "stop"} for j in range(n)]
    return httpx.Response(200, json={"choices": choices})


def test_calls_group_requests_alike_but_for_n() -> None:
    rs = [
        request(0),
        request(1, n=3),
        request(2, seed=5),  # seeded: alone (one seed per call would draw copies alike)
        request(3, max_tokens=2),  # another step cap: a call of its own
        request(4),
        request(5, max_tokens=None),  # no max_tokens: alone
        request(6, max_tokens=2),
        request(7, prompt_logprobs=1),  # prompt logprobs are per prompt: alone
    ]
    groups = joint.calls(rs, max_model_len=64)
    assert [(g.members, g.max_tokens) for g in groups] == [
        ((0, 1, 4), 4),
        ((2,), 4),
        ((3, 6), 2),
        ((5,), None),
        ((7,), 4),
    ]


def test_a_request_capped_at_its_room_shares_a_call_with_a_larger_cap() -> None:
    """vLLM caps the call's max_tokens at each prompt's room: a path whose cap is its
    room (the context's end) takes the same tokens from a call with a larger cap."""
    rs = [
        request(0, max_tokens=6),  # prompt 10 of 16: its room, 6
        request(1, max_tokens=5),  # its room, 5: joins the call of cap 6
        request(2, max_tokens=3),  # under its room (4): needs a call of cap 3
        request(3, max_tokens=3),  # its room, 3: joins the call of cap 3
    ]
    groups = joint.calls(rs, max_model_len=16)
    assert [(g.members, g.max_tokens) for g in groups] == [((0, 1), 6), ((2, 3), 3)]


def test_a_joint_call_with_one_n_sends_each_prompt_once() -> None:
    call = joint.JointCall.of([request(0), request(1)], 4)
    assert call.n == 2 and call.prompts == (
        request(0).prompt_token_ids,
        request(1).prompt_token_ids,
    )
    lead = call.lead()
    assert lead.sampling.n == 4 and lead.affinity == "client-1"
    assert lead.request_id == "r-0-joint2"


def test_a_joint_call_with_several_ns_sends_a_prompt_per_sample() -> None:
    call = joint.JointCall.of([request(0, n=1), request(1, n=3)], 4)
    assert call.n == 1 and call.samples == 4
    assert [len(p) for p in call.prompts] == [10, 11, 11, 11]


async def test_requests_alike_go_as_one_completions_call_and_come_back_split() -> None:
    seen: list[tuple[str, dict[str, object]]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append((r.url.path, orjson.loads(r.content)))
        return completions(r) if r.url.path == "/v1/completions" else generate(r)

    eng = engine(handler)
    out = await eng.generate_batch([request(0), request(1, n=3), request(2, seed=5), request(3)])
    paths = sorted(p for p, _ in seen)
    assert paths == ["/inference/v1/generate", "/v1/completions"]
    body = next(b for p, b in seen if p == "/v1/completions")
    # Several n: one prompt per sample, n = 1; the shared parameters once.
    assert body["n"] == 1 and body["max_tokens"] == 4 and body["stop_token_ids"] == [9]
    assert [len(p) for p in body["prompt"]] == [10, 10, 11, 11, 11, 13, 13]  # type: ignore[union-attr]
    assert body["return_token_ids"] is True
    # Each request gets its own samples, indexed from 0, in its own order.
    assert [[s.token_ids for s in got] for got in out] == [
        [(10, 0), (10, 0)],
        [(11, 0), (11, 0), (11, 0)],
        [(0, 0), (0, 1)],  # the seeded one, alone over the server's own protocol
        [(13, 0), (13, 0)],
    ]
    assert [[s.index for s in got] for got in out] == [[0, 1], [0, 1, 2], [0, 1], [0, 1]]
    up = eng.upstreams[0]
    assert up.requests == 2 and up.outstanding_samples == 0 and up.outstanding_requests == 0
    await eng.aclose()


async def test_a_joint_call_keeps_its_affinity_key_and_moves_whole_on_a_failure() -> None:
    seen: list[tuple[str, str | None, int]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        prompts = len(orjson.loads(r.content)["prompt"])
        seen.append((host(r), r.headers.get("X-Session-ID"), prompts))
        if host(r) == A:
            raise httpx.ConnectError("refused", request=r)
        return completions(r)

    eng = engine(handler)
    out = await eng.generate_batch([request(0), request(1)])
    assert [len(got) for got in out] == [2, 2]
    # A refused it (and is ejected); the whole call went to B with a fresh key.
    assert seen == [(A, "client-1", 2), (B, "client-1-retry1", 2)]
    assert eng.upstreams[0].state == "down"
    await eng.aclose()


async def test_a_prompt_too_long_for_the_context_is_a_400() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing should be sent")

    eng = engine(handler)  # a context of 64 tokens
    long = replace(request(1), prompt_token_ids=tuple(range(70)))
    with pytest.raises(tree.InvalidRequest, match="70 tokens"):
        await eng.generate_batch([request(0), long])
    await eng.aclose()


async def test_a_short_answer_is_a_backend_error() -> None:
    def handler(r: httpx.Request) -> httpx.Response:
        choices = [{"index": 0, "token_ids": [1], "finish_reason": "stop", "text": ""}]
        return httpx.Response(200, json={"choices": choices})

    eng = engine(handler)
    with pytest.raises(tree.BackendError, match="samples"):
        await eng.generate_batch([request(0), request(1)])
    await eng.aclose()


async def test_switched_off_every_request_goes_alone_over_the_servers_protocol() -> None:
    paths: list[str] = []

    def handler(r: httpx.Request) -> httpx.Response:
        paths.append(r.url.path)
        return generate(r)

    eng = engine(handler)
    eng._settings = replace(eng._settings, joint_calls=False)
    out = await eng.generate_batch([request(0), request(1)])
    assert [len(got) for got in out] == [2, 2]
    assert paths == ["/inference/v1/generate"] * 2
    await eng.aclose()


async def test_every_call_of_a_request_carries_its_tenant_as_the_fleets_fairness_id() -> None:
    """llm-d's endpoint picker weighs tenants by ``x-llm-d-inference-fairness-id``: every
    call of one request, retries included, names the request's tenant (one tenant, not
    one per sample)."""
    seen: list[tuple[str, str | None]] = []
    objectives: list[str | None] = []

    def handler(r: httpx.Request) -> httpx.Response:
        seen.append((host(r), r.headers.get("x-llm-d-inference-fairness-id")))
        objectives.append(r.headers.get("x-llm-d-inference-objective"))
        if host(r) == A:
            raise httpx.ConnectError("refused", request=r)
        return completions(r) if r.url.path == "/v1/completions" else generate(r)

    eng = engine(handler)
    ours = [
        replace(request(0), tenant="research", objective="batch"),
        replace(request(1, n=3), tenant="research", objective="batch"),
    ]
    await eng.generate_batch(ours)
    await eng.generate(request(2))  # no tenant known: no header
    assert seen == [(A, "research"), (B, "research"), (B, None)]
    assert objectives == ["batch", "batch", None]
    await eng.aclose()
