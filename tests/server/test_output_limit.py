"""A request that sets no output limit stops at a default a user would expect (the
server's setting, the model's generation config, the default model's own), not at the end
of a 65,536-token context; a request's own limit is kept."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from core import defaults
from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.pipeline.output_limit import default_max_tokens
from server.settings import Settings

ANSWER = "3+4=7\n</think>\\boxed{7}"
MSG = [{"role": "user", "content": "Compute 3+4 mod 10."}]


def test_the_first_source_that_says_wins(tmp_path: Path) -> None:
    offered = defaults.installed()
    assert offered.max_tokens == 1024  # the testbed's own
    assert default_max_tokens(Settings()) == 1024  # the default model
    assert default_max_tokens(Settings(default_max_tokens=300)) == 300
    plain = tmp_path / "plain"
    plain.mkdir()
    assert default_max_tokens(Settings(model=str(plain))) is None  # vLLM's rule
    (plain / "generation_config.json").write_text(json.dumps({"max_new_tokens": 2048}))
    assert default_max_tokens(Settings(model=str(plain))) == 2048
    assert default_max_tokens(Settings(model=str(plain), default_max_tokens=64)) == 64
    assert default_max_tokens(Settings(model="org/hub-id")) is None


def test_defaults_refuse_a_bad_max_tokens() -> None:
    import pytest

    raw = {"model": "m", "served_name": "s"}
    assert defaults.ModelDefaults.parse({**raw, "max_tokens": 9}, "p").max_tokens == 9
    for bad in (0, True, "9"):
        with pytest.raises(defaults.NoDefaultModel, match="max_tokens"):
            defaults.ModelDefaults.parse({**raw, "max_tokens": bad}, "p")


async def test_requests_without_a_limit_get_the_default_on_every_route(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    seen: list[GenerateRequest] = []

    def handler(request: GenerateRequest) -> Sequence[Sample]:
        seen.append(request)
        return samples_of(testbed_tokens, *[ANSWER] * request.sampling.n)

    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    async with scripted_app(handler, default_max_tokens=200) as app:
        m = app.model
        await app.client.post(
            "/v1/chat/completions", json={"model": m, "messages": MSG, "tools": [tool]}
        )
        await app.client.post("/v1/responses", json={"model": m, "input": "Compute 3+4 mod 10."})
        await app.client.post("/v1/completions", json={"model": m, "prompt": "3+4="})
        own = {"model": m, "messages": MSG, "max_tokens": 100}
        await app.client.post("/v1/chat/completions", json=own)
    assert [r.sampling.max_tokens for r in seen] == [200, 200, 200, 100]
