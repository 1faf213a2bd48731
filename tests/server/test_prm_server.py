"""thinkgate's PRM server (``engines/local/prm_server.py``) without vLLM: its routes over
a stand-in engine, and ``RemotePrm`` (what ``--prm-url`` attaches) reading it through
real HTTP semantics (httpx's ASGI transport). The live server over vLLM is exercised in
tests/server/test_prm_vllm.py and by every remote step search."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

import testbed
from core.errors import BackendUnavailable
from engines.local.prm import RemotePrm, Tally
from engines.local.prm_server import MAX_INPUTS, Tokenizer, build_app
from testbed.tokenizer import CharCodec

TAG = CharCodec().encode("\n")[0]


class FakePrm:
    """Rewards that say where each tag is (0.01 x its position); the token counters the
    real engine keeps (a tenth of each sequence "computed")."""

    def __init__(self) -> None:
        self.max_model_len = 64
        self.calls: list[list[list[int]]] = []
        self.dead = False
        self.closed = False

    async def step_rewards(
        self, sequences: Sequence[Sequence[int]], tally: Tally | None = None
    ) -> list[list[float]]:
        self.calls.append([list(s) for s in sequences])
        tally = Tally() if tally is None else tally
        tally.asked += sum(len(s) for s in sequences)
        tally.scored += sum(max(1, len(s) // 10) for s in sequences)
        return [[0.01 * i for i, t in enumerate(s) if t == TAG] for s in sequences]

    async def health(self) -> None:
        if self.dead:
            raise BackendUnavailable("the PRM engine is dead; the server must be restarted")

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
def prm() -> FakePrm:
    return FakePrm()


@pytest.fixture
async def client(prm: FakePrm) -> AsyncIterator[httpx.AsyncClient]:
    tok = Tokenizer(str(testbed.model_path("prm")))
    app = build_app(prm, served_name="testbed-prm", tokenizer=tok)  # type: ignore[arg-type]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://prm") as c:
            yield c
    assert prm.closed  # the app stops the engine it owns on shutdown


def _ids(text: str) -> list[int]:
    return CharCodec().encode(text)


async def test_remote_prm_reads_one_reward_per_step_tag_from_it(
    client: httpx.AsyncClient, prm: FakePrm
) -> None:
    remote = RemotePrm("http://prm", step_tag_id=TAG, client=client)
    paths = [_ids("q\n1+1=2\n2+1=3\n"), _ids("q\n1+1=3\n")]
    rewards = await remote.step_rewards(paths)
    assert rewards == [
        pytest.approx([0.01, 0.07, 0.13]),
        pytest.approx([0.01, 0.07]),
    ]
    assert prm.calls == [paths]  # one engine call for the whole step


async def test_pooling_rows_and_usage_in_vllms_shape(client: httpx.AsyncClient) -> None:
    ids = _ids("q\n1+1=2\n")
    r = await client.post("/pooling", json={"input": ids, "task": "token_classify"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "testbed-prm"
    (item,) = body["data"]
    assert item["index"] == 0 and item["data"] == [
        pytest.approx([0.99, 0.01]),
        pytest.approx([0.93, 0.07]),
    ]
    usage = body["usage"]
    assert usage["prompt_tokens"] == len(ids) == usage["total_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == len(ids) - 1


async def test_text_inputs_are_tokenized_by_the_prms_tokenizer(
    client: httpx.AsyncClient, prm: FakePrm
) -> None:
    r = await client.post("/pooling", json={"input": ["q\n1+1=2\n", "q\n"]})
    assert r.status_code == 200, r.text
    assert prm.calls == [[_ids("q\n1+1=2\n"), _ids("q\n")]]
    tok = await client.post("/tokenize", json={"prompt": "1+1", "add_special_tokens": False})
    assert tok.status_code == 200 and tok.json()["tokens"] == _ids("1+1")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": []}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": [[1, -2]]}, "input"),
        ({"input": [[1, True]]}, "input"),
        ({"input": [1.5]}, "input"),
        ({"input": {"a": 1}}, "input"),
        ({"messages": [{"role": "user", "content": "x"}]}, "input"),
        ({"input": [[1]] * (MAX_INPUTS + 1)}, "input"),
        ({"input": [1] * 65}, "input"),  # past the PRM's context
        ({"input": [1], "task": "embed"}, "task"),
        ({"input": [1], "model": "other"}, "model"),
        ({"input": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
    ],
)
async def test_bad_pooling_requests_are_openai_style_400s(
    client: httpx.AsyncClient, prm: FakePrm, body: dict[str, Any], param: str
) -> None:
    r = await client.post("/pooling", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert prm.calls == []  # refused before the engine


async def test_a_body_that_is_not_a_json_object_is_a_400(client: httpx.AsyncClient) -> None:
    for content in (b"{", b"[1, 2]"):
        r = await client.post("/pooling", content=content)
        assert r.status_code == 400 and "body" in r.json()["error"]["message"]


async def test_models_health_and_metrics(client: httpx.AsyncClient, prm: FakePrm) -> None:
    models = (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "testbed-prm"
    assert models["data"][0]["max_model_len"] == 64
    assert (await client.get("/health")).status_code == 200
    await client.post("/pooling", json={"input": [_ids("q\n12\n"), _ids("ab\n")]})
    text = (await client.get("/metrics")).text
    assert "thinkgate_prm_requests_total 1" in text
    assert "thinkgate_prm_sequences_total 2" in text
    assert "thinkgate_prm_asked_tokens_total 8" in text
    assert "thinkgate_prm_scored_tokens_total 2" in text
    prm.dead = True
    dead = await client.get("/health")
    assert dead.status_code == 503 and dead.json()["error"]["type"] == "service_unavailable"
