"""Tenants over real HTTP, through the OpenAI SDK: keys from a keys file (reloaded
without a restart), every limit just under and just over, the 413/400/429s named, and
the tokens billed per tenant equal to its responses' usage. The gateway's own app and
uvicorn in this process, over a scripted engine (fast tier; the live engine's tenants
are in test_tenants_live.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import structlog.testing
import uvicorn
from conftest import uvicorn_in_thread

from core.engine import GenerateRequest, Sample
from engines.scripted import ScriptedEngine, samples_of
from server.app import create_app
from server.settings import Settings
from server.tenancy.tenants import hashed

KEYS = {"alpha": "tg-alpha", "beta": "tg-beta", "rated": "tg-rated", "metered": "tg-metered"}
LIMITS = {
    "alpha": "budget_samples = 4\nmax_messages = 3\nmax_prompt_tokens = 200\nmax_body_bytes = 3000",
    "beta": "",
    "rated": "requests_per_minute = 2",
    "metered": "tokens_per_minute = 100",
}
ANSWER = "3\n</think>\\boxed{3}"


def keys_file(tenants: dict[str, str]) -> str:
    return "\n".join(
        f'[tenants.{name}]\nkeys = ["{hashed(key)}"]\n{LIMITS.get(name, "")}\n'
        for name, key in tenants.items()
    )


class Server:
    def __init__(self, url: str, keys: Path, engine: ScriptedEngine | None = None) -> None:
        self.url = url
        self.keys = keys
        self.engine = engine

    def client(self, tenant: str, key: str | None = None) -> Any:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key or KEYS[tenant], max_retries=0)

    def metric(self, name: str, **labels: str) -> float:
        # Behind the keys, as every route is when there are keys: any tenant's key reads it.
        auth = {"Authorization": f"Bearer {next(iter(KEYS.values()))}"}
        text = httpx.get(f"{self.url}/metrics", headers=auth).text
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith(f"{name}{{{want}}} "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, testbed_tokens: Any) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("tenants")
    keys = tmp / "keys.toml"
    keys.write_text(keys_file(KEYS))

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(testbed_tokens, *[ANSWER] * max(1, request.sampling.n))

    engine = ScriptedEngine(handler, tokens=testbed_tokens, model_name="testbed-base")
    settings = Settings(
        reward_model="none", prm_model="none", state_dir=str(tmp), keys_file=str(keys)
    )
    config = uvicorn.Config(create_app(settings, engine=engine), log_level="warning")
    with uvicorn_in_thread(config) as port:
        yield Server(f"http://127.0.0.1:{port}", keys, engine)


def ask(client: Any, *, n: int = 1, messages: int = 1, **extra: Any) -> Any:
    turns = [
        {"role": "user", "content": "Compute 1+2 mod 10."}
        if i % 2 == 0
        else {"role": "assistant", "content": "3"}
        for i in range(messages)
    ]
    return client.chat.completions.create(
        model="testbed-base", messages=turns, n=n, max_tokens=20, **extra
    )


def test_a_key_revoked_in_the_file_is_refused_at_once_and_a_new_one_admitted(
    server: Server,
) -> None:
    assert ask(server.client("beta")).choices[0].message.content == "\\boxed{3}"
    assert server.engine is not None  # the engine call names the tenant, online
    last = server.engine.calls[-1]
    assert (last.tenant, last.objective) == ("beta", "interactive")
    with pytest.raises(openai.AuthenticationError):
        ask(server.client("beta", key="tg-wrong"))
    server.keys.write_text(keys_file({**{k: v for k, v in KEYS.items() if k != "beta"}}))
    with pytest.raises(openai.AuthenticationError):
        ask(server.client("beta"))  # revoked: refused with no restart
    server.keys.write_text(keys_file({**KEYS, "gamma": "tg-gamma"}))
    assert ask(server.client("gamma", key="tg-gamma")).choices[0].finish_reason == "stop"
    assert ask(server.client("beta")).choices  # back in


def test_budget_and_request_limits_just_under_and_just_over(server: Server) -> None:
    alpha = server.client("alpha")
    sc = {"extra_headers": {"X-Strategy": "self-consistency"}}
    assert len(ask(alpha, extra_headers={"X-Budget-Samples": "4"}).choices) == 1
    with pytest.raises(openai.BadRequestError) as info:
        ask(alpha, extra_headers={"X-Budget-Samples": "5"})
    err = info.value.body
    assert err["param"] == "X-Budget-Samples" and err["code"] == "tenant_limit_exceeded"
    assert "tenant 'alpha' may ask for at most 4" in err["message"]
    assert len(ask(alpha, n=4).choices) == 4
    with pytest.raises(openai.BadRequestError) as info:
        ask(alpha, n=5, **sc)
    assert info.value.body["param"] == "n"
    ask(alpha, messages=3)
    with pytest.raises(openai.BadRequestError) as info:
        ask(alpha, messages=4)
    assert info.value.body["param"] == "messages" and "at most 3" in info.value.body["message"]
    # The prompt as token ids: exactly 200, then 201.
    alpha.completions.create(model="testbed-base", prompt=[5] * 200, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as info:
        alpha.completions.create(model="testbed-base", prompt=[5] * 201, max_tokens=4)
    assert info.value.body["param"] == "prompt" and "201 tokens" in info.value.body["message"]
    # The body: the tenant's 3000 bytes, not the server's million.
    big = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": "testbed-base", "prompt": "x" * 3000},
        headers={"Authorization": f"Bearer {KEYS['alpha']}"},
    )
    assert big.status_code == 413 and "tenant 'alpha'" in big.json()["error"]["message"]
    assert (
        server.metric("thinkgate_tenant_rejections_total", tenant="alpha", reason="max_body_bytes")
        == 1
    )
    assert (
        server.metric("thinkgate_tenant_rejections_total", tenant="alpha", reason="budget_samples")
        == 2
    )
    assert (
        server.metric("thinkgate_tenant_rejections_total", tenant="alpha", reason="max_messages")
        == 1
    )


def test_requests_per_minute_is_a_429_with_the_windows_retry_after(server: Server) -> None:
    rated = server.client("rated")
    ask(rated)
    ask(rated)
    with pytest.raises(openai.RateLimitError) as info:
        ask(rated)
    assert info.value.body["code"] == "rate_limit_exceeded"
    retry = int(info.value.response.headers["Retry-After"])
    assert 55 <= retry <= 60  # the first of the two leaves the minute then
    ask(server.client("beta"))  # another tenant is not held by it


def test_tokens_per_minute_reserves_the_worst_case_and_bills_the_usage(server: Server) -> None:
    metered = server.client("metered")
    first = metered.chat.completions.create(
        model="testbed-base", messages=[{"role": "user", "content": "1+2"}], max_tokens=50
    )
    spent = first.usage.completion_tokens
    assert 0 < spent < 50
    left = 100 - spent
    # Just under: its worst case (max_tokens) is exactly what the minute has left.
    second = metered.chat.completions.create(
        model="testbed-base", messages=[{"role": "user", "content": "1+2"}], max_tokens=left
    )
    spent += second.usage.completion_tokens
    with pytest.raises(openai.RateLimitError) as info:  # just over
        metered.chat.completions.create(
            model="testbed-base",
            messages=[{"role": "user", "content": "1+2"}],
            max_tokens=100 - spent + 1,
        )
    assert int(info.value.response.headers["Retry-After"]) >= 50
    billed = server.metric("thinkgate_tenant_tokens_total", tenant="metered", kind="completion")
    assert billed == spent
    assert server.metric("thinkgate_tenant_reserved_tokens", tenant="metered") == 0


def test_the_tokens_billed_are_the_sum_of_the_responses_usage_streams_included(
    server: Server,
) -> None:
    before = server.metric("thinkgate_tenant_tokens_total", tenant="beta", kind="completion")
    before_prompt = server.metric("thinkgate_tenant_tokens_total", tenant="beta", kind="prompt")
    beta = server.client("beta")
    completion = prompt = 0
    for n in (1, 3):
        reply = ask(beta, n=n)
        completion += reply.usage.completion_tokens
        prompt += reply.usage.prompt_tokens
    stream = beta.chat.completions.create(
        model="testbed-base",
        messages=[{"role": "user", "content": "Compute 1+2 mod 10."}],
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [c.usage for c in stream if c.usage is not None][-1]
    completion += usage.completion_tokens
    prompt += usage.prompt_tokens
    after = server.metric("thinkgate_tenant_tokens_total", tenant="beta", kind="completion")
    assert after - before == completion
    after_prompt = server.metric("thinkgate_tenant_tokens_total", tenant="beta", kind="prompt")
    assert after_prompt - before_prompt == prompt
    assert server.metric("thinkgate_tenant_requests_total", tenant="beta", status="200") >= 3


MARK = "9*8*7*6*5*4*3*2"  # in the testbed vocabulary: decoded as sent
STRATEGY_MARK = "no-such-strategy-5150"  # a 400's message quotes it


def _logged(server: Server, tenant: str, key: str | None = None) -> list[dict[str, Any]]:
    """The log events of a good request, a bad one and a wrong key, each with a marked
    prompt."""
    client = server.client(tenant, key)
    marked = [{"role": "user", "content": f"Compute {MARK} mod 10."}]
    with structlog.testing.capture_logs() as events:
        client.chat.completions.create(model="testbed-base", messages=marked, max_tokens=20)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="testbed-base", messages=marked, max_tokens=10**6)
        with pytest.raises(openai.BadRequestError, match=STRATEGY_MARK):  # quoted back
            client.chat.completions.create(
                model="testbed-base",
                messages=marked,
                extra_headers={"X-Strategy": STRATEGY_MARK},
            )
        with pytest.raises(openai.AuthenticationError):
            ask(server.client(tenant, key=f"{KEYS[tenant]}-WRONG"))
    return events


def test_no_key_prompt_or_answer_text_in_the_logs(server: Server) -> None:
    events = _logged(server, "beta")
    text = repr(events)
    assert MARK not in text and KEYS["beta"] not in text and "boxed" not in text
    assert STRATEGY_MARK not in text  # a refusal's message quotes the request: not logged
    ends = [e for e in events if e["event"] == "request.end"]
    assert [e["status"] for e in ends] == ["200", "400", "400", "401"]
    assert [e.get("tenant") for e in ends] == ["beta", "beta", "beta", None]


def test_log_content_puts_the_prompt_and_answer_in_the_log(
    tmp_path: Path, testbed_tokens: Any
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(keys_file(KEYS))
    engine = ScriptedEngine(
        lambda r: samples_of(testbed_tokens, ANSWER),
        tokens=testbed_tokens,
        model_name="testbed-base",
    )
    settings = Settings(
        reward_model="none",
        prm_model="none",
        state_dir=str(tmp_path),
        keys_file=str(keys),
        log_content=True,
    )
    config = uvicorn.Config(create_app(settings, engine=engine), log_level="warning")
    with uvicorn_in_thread(config) as port:
        events = _logged(Server(f"http://127.0.0.1:{port}", keys), "beta")
    (content,) = [e for e in events if e["event"] == "request.content"]
    assert MARK in content["prompts"][0] and content["answers"] == ["\\boxed{3}"]
    assert STRATEGY_MARK in repr(events)  # the refusal's message too
    assert KEYS["beta"] not in repr(events)  # a key never, even then
