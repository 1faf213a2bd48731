"""The PRM's server side without vLLM: the ``/pooling`` client's parsing (MockTransport),
the resource builder's decisions (default attached / left out / named mismatch), the
settings and the PRM replica's command."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

import testbed
from core.errors import BackendError
from engines.local import prm as prm_engines
from engines.local.prm import RemotePrm, rewards_from_rows, step_tag_of
from engines.local.replica import build_prm_command
from server.cli import settings_parser
from server.resources import model_match
from server.resources import prm as prm_resources
from server.resources.prm import prm_model_path, process_reward_model
from server.settings import Settings
from strategies.prm import RESOURCE_KEY, ProcessRewardModel
from testbed.tokenizer import CharCodec

TAG = CharCodec().encode("\n")[0]


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


def test_the_testbed_prm_declares_the_newline_as_its_step_tag() -> None:
    assert step_tag_of(testbed.model_path("prm")) == TAG == 47
    assert step_tag_of("/nowhere") == prm_engines.VLLM_DEFAULT_STEP_TAG


def test_rewards_are_the_right_labels_probability_one_per_tag() -> None:
    assert rewards_from_rows([[0.9, 0.1], [0.2, 0.8]], tags=2) == [0.1, 0.8]
    with pytest.raises(BackendError, match="step_tag_id"):
        rewards_from_rows([[0.9, 0.1]], tags=2)  # served with another step tag
    with pytest.raises(BackendError, match="shape"):
        rewards_from_rows([[0.1], [0.2]], tags=2)  # a one-label model: not a PRM


async def test_remote_prm_posts_token_ids_and_reads_pooled_rows_in_index_order() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert request.url.path == "/pooling"
        return httpx.Response(
            200,
            json={
                "object": "list",
                "data": [
                    {"index": 1, "object": "pooling", "data": [[0.7, 0.3]]},
                    {"index": 0, "object": "pooling", "data": [[0.1, 0.9], [0.4, 0.6]]},
                ],
            },
        )

    prm = RemotePrm("http://prm/", step_tag_id=TAG, client=_client(handler))
    got = await prm.step_rewards([[5, TAG, 6, TAG], [7, TAG]])
    assert got == [[0.9, 0.6], [0.3]]
    assert seen == [{"input": [[5, TAG, 6, TAG], [7, TAG]], "task": "token_classify"}]
    assert await prm.step_rewards([]) == []


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        ({"data": [{"index": 0, "data": [[0.1, 0.9]]}]}, "1 results for 2"),
        ({"nothing": []}, "unexpected shape"),
        ({"data": [{"index": 0, "data": [[0.5]]}, {"index": 1, "data": [[0.5]]}]}, "shape"),
        # A server without STEP pooling at our tag: one row per token (ALL) or none.
        ({"data": [{"index": 0, "data": []}, {"index": 1, "data": []}]}, "step_tag_id"),
    ],
)
async def test_remote_prm_refuses_answers_it_cannot_read(answer: object, match: str) -> None:
    prm = RemotePrm(
        "http://prm", step_tag_id=TAG, client=_client(lambda r: httpx.Response(200, json=answer))
    )
    with pytest.raises(BackendError, match=match):
        await prm.step_rewards([[1, TAG], [2, TAG]])


async def test_remote_prm_maps_an_error_status_to_a_backend_error() -> None:
    prm = RemotePrm(
        "http://prm", step_tag_id=TAG, client=_client(lambda r: httpx.Response(400, json={}))
    )
    with pytest.raises(BackendError, match="PRM server answered HTTP 400"):
        await prm.step_rewards([[1, TAG]])


def test_prm_settings_follow_the_reward_models() -> None:
    parser = settings_parser(Settings)
    args = parser.parse_args(["--prm-model", "none", "--prm-url", "http://h:1"])
    assert args.prm_model == "none" and args.prm_url == "http://h:1"
    assert prm_model_path(Settings(prm_model="none")) is None
    assert prm_model_path(Settings(prm_model=" NONE ")) is None
    assert prm_model_path(Settings()) == testbed.model_path("prm")  # the default, in process
    assert prm_model_path(Settings(prm_model="/x/prm")) == Path("/x/prm")
    remote = Settings(engine="remote", vllm_urls=("http://h:1",))
    assert prm_model_path(remote) is None  # remote gateways start no PRM unless asked
    asked = Settings(engine="remote", vllm_urls=("http://h:1",), prm_model="/x/prm")
    assert prm_model_path(asked) == Path("/x/prm")


class FakePrm:
    def __init__(self, model: str, **kw: Any) -> None:
        self.model, self.kw = model, kw
        self.step_tag_id = kw["step_tag_id"] if kw.get("step_tag_id") is not None else TAG
        self.max_model_len = kw["max_model_len"]
        self.closed = False

    async def step_rewards(self, sequences: Any) -> list[list[float]]:
        return [[1.0] for _ in sequences]

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
def fake_start(monkeypatch: pytest.MonkeyPatch) -> list[FakePrm]:
    started: list[FakePrm] = []

    def start(model: str, **kw: Any) -> FakePrm:
        started.append(FakePrm(model, **kw))
        return started[-1]

    monkeypatch.setattr(prm_engines.PrmEngine, "start", staticmethod(start))
    return started


def _engine(tokens: Any, name: str = "served") -> Any:
    return SimpleNamespace(tokens=tokens, model_name=name)


def _other_tokens() -> Any:
    return SimpleNamespace(encode=lambda text: [ord(c) for c in text])


async def test_the_default_prm_is_attached_in_front_of_the_testbed_model(
    testbed_tokens: Any, fake_start: list[FakePrm]
) -> None:
    async with AsyncExitStack() as stack:
        got = await prm_resources.prm_resources(Settings(), _engine(testbed_tokens), stack)
        prm = got[RESOURCE_KEY]
        assert isinstance(prm, ProcessRewardModel) and prm.step_tag_id == TAG
        assert prm.max_len == 512 and prm.name == "prm"
        assert fake_start[0].model == str(testbed.model_path("prm"))
    assert fake_start[0].closed  # torn down with the stack


async def test_the_default_prm_in_front_of_another_model_is_left_out(
    fake_start: list[FakePrm],
) -> None:
    async with AsyncExitStack() as stack:
        assert await process_reward_model(Settings(), _engine(_other_tokens()), stack) is None
    assert not fake_start


async def test_a_named_prm_with_another_tokenizer_fails_start_up(
    fake_start: list[FakePrm],
) -> None:
    settings = Settings(prm_model=str(testbed.model_path("prm")))
    async with AsyncExitStack() as stack:
        with pytest.raises(model_match.TokenizerMismatch, match="--prm-model none"):
            await process_reward_model(settings, _engine(_other_tokens()), stack)
    assert not fake_start


async def test_a_named_prm_without_files_fails_and_none_starts_nothing(
    testbed_tokens: Any, fake_start: list[FakePrm], tmp_path: Path
) -> None:
    async with AsyncExitStack() as stack:
        with pytest.raises(RuntimeError, match="no config.json"):
            await process_reward_model(
                Settings(prm_model=str(tmp_path)), _engine(testbed_tokens), stack
            )
        none = Settings(prm_model="none")
        assert await prm_resources.prm_resources(none, _engine(testbed_tokens), stack) == {}
    assert not fake_start


async def test_prm_url_attaches_the_remote_client_with_the_default_prms_tag(
    testbed_tokens: Any, fake_start: list[FakePrm], monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = model_match.probe_ids(testbed_tokens.encode)
    monkeypatch.setattr(
        model_match, "remote_probe", lambda url, timeout_s, transport: (probe, "prm")
    )
    async with AsyncExitStack() as stack:
        prm = await process_reward_model(
            Settings(prm_url="http://prm:1"), _engine(testbed_tokens), stack
        )
        assert prm is not None and isinstance(prm.model, RemotePrm)
        assert prm.step_tag_id == TAG and prm.model.url == "http://prm:1/pooling"
        tagged = Settings(prm_url="http://prm:1", prm_step_tag_id=9)
        other = await process_reward_model(tagged, _engine(testbed_tokens), stack)
        assert other is not None and other.step_tag_id == 9
    assert not fake_start


async def test_a_prm_server_with_another_tokenizer_fails_start_up(
    testbed_tokens: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        model_match, "remote_probe", lambda url, timeout_s, transport: ((1, 2), "other")
    )
    async with AsyncExitStack() as stack:
        with pytest.raises(model_match.TokenizerMismatch, match="PRM server"):
            await process_reward_model(
                Settings(prm_url="http://prm:1"), _engine(testbed_tokens), stack
            )


def test_the_prm_replica_runs_thinkgates_prm_server_by_default() -> None:
    cmd = build_prm_command(None, ["--port", "8111"], cpu=True)
    assert cmd[1:3] == ["-m", "engines.local.prm_server"]
    assert cmd[cmd.index("--model") + 1] == str(testbed.model_path("prm"))
    assert "--max-model-len" not in cmd  # the PRM's own context (512), not the generator's
    assert cmd[cmd.index("--shutdown-timeout") + 1] == "30"
    assert cmd[-2:] == ["--port", "8111"]
    # What it starts parses these flags (an unknown one would stop it at start-up).
    from engines.local.prm_server import parse_args

    parsed = parse_args(cmd[3:])
    assert parsed.port == 8111 and parsed.max_model_len is None


def test_the_prm_server_compiles_off_cpu_or_when_told() -> None:
    from engines.local.prm_server import eager, parse_args

    # Unasked: eager on CPU only (vLLM's own default, compiled, elsewhere).
    unasked = parse_args(["--model", "m"]).enforce_eager
    assert unasked is None
    assert eager(unasked, on_cpu=True) and not eager(unasked, on_cpu=False)
    told = parse_args(["--model", "m", "--no-enforce-eager"]).enforce_eager
    assert told is False and not eager(told, on_cpu=True)
    forced = parse_args(["--model", "m", "--enforce-eager"]).enforce_eager
    assert eager(forced, on_cpu=False)


def test_the_vllm_prm_replica_runs_step_pooling_at_the_prms_tag() -> None:
    cmd = build_prm_command(None, ["--port", "8111"], cpu=True, server="vllm")
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == str(testbed.model_path("prm"))
    assert cmd[cmd.index("--runner") + 1] == "pooling"
    assert json.loads(cmd[cmd.index("--pooler-config") + 1]) == {"step_tag_id": TAG}
    assert "--max-model-len" not in cmd
    assert "--logits-processors" not in cmd and cmd[-2:] == ["--port", "8111"]
    named = build_prm_command("/x/prm", ["--pooler-config", "{}"], cpu=False, server="vllm")
    assert named.count("--pooler-config") == 1 and "--max-model-len" not in named


async def test_default_scorer_prm_is_left_to_each_request(testbed_tokens: Any) -> None:
    """``--default-scorer prm``: the scorer set keeps logprob as its own default (the
    fallback) and the sampling defaults name the PRM, which another builder attaches."""
    from server.resources.scoring import sampling_resources
    from strategies.pool import DEFAULTS_KEY, SamplingDefaults
    from strategies.scorers import RESOURCE_KEY, ScorerSet

    settings = Settings(reward_model="none", default_scorer="prm")
    async with AsyncExitStack() as stack:
        got = await sampling_resources(settings, _engine(testbed_tokens), stack)
    defaults, scorers = got[DEFAULTS_KEY], got[RESOURCE_KEY]
    assert isinstance(defaults, SamplingDefaults) and defaults.scorer == "prm"
    assert isinstance(scorers, ScorerSet) and scorers.default == "logprob"
    async with AsyncExitStack() as stack:
        plain = await sampling_resources(
            Settings(reward_model="none"), _engine(testbed_tokens), stack
        )
    assert plain[DEFAULTS_KEY].scorer is None  # type: ignore[attr-defined]
