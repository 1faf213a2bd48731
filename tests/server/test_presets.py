"""Strategy presets chosen by model name (``server.presets``), over the app with a
scripted engine (fast): the preset's strategy and budget, what the request sets winning,
the listing, a file that replaces the built-in ones, and the 404s."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server import presets

MSG = [{"role": "user", "content": "Compute 3+4 mod 10."}]


def _handler(tokens: Any) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *["3+4=7\n</think>\\boxed{7}"] * request.sampling.n)

    return handler


async def test_a_preset_model_runs_its_strategy_and_budget(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        client = app.openai()
        r = await client.chat.completions.with_raw_response.create(
            model=f"{app.model}@self-consistency-8", messages=MSG
        )
        assert r.parse().model_extra["thinkgate"]["strategy"] == "self-consistency"
        assert "samples=8" in r.headers["X-Budget-Applied"]
        # What the request sets wins, field by field: the header's samples, the preset's
        # strategy.
        r = await client.chat.completions.with_raw_response.create(
            model=f"{app.model}@self-consistency-8",
            messages=MSG,
            extra_headers={"X-Budget-Samples": "3"},
        )
        assert "samples=3" in r.headers["X-Budget-Applied"]
        auto = await client.responses.with_raw_response.create(
            model=f"{app.model}@auto-2s", input="Compute 3+4 mod 10."
        )
        assert "deadline_ms=2000" in auto.headers["X-Budget-Applied"]
        assert auto.parse().model_extra["thinkgate"]["strategy"] == "auto"
        claude = await app.anthropic().messages.create(
            model=f"{app.model}@auto-1k", max_tokens=64, messages=MSG
        )
        assert claude.model_extra["thinkgate"]["budget"]["tokens"] == 1000  # type: ignore[index]
        listed = [m.id for m in (await client.models.list()).data]
        assert listed[0] == app.model
        assert {f"{app.model}@{name}" for name in presets.BUILT_IN} == set(listed[1:])
        assert (await client.models.retrieve(f"{app.model}@auto-2s")).id == f"{app.model}@auto-2s"
        for wrong in (f"{app.model}@nope", "other@auto-2s", "other"):
            with pytest.raises(openai.NotFoundError) as info:
                await client.chat.completions.create(model=wrong, messages=MSG)
            assert "auto-2s" in info.value.message
        assert app.engine.calls  # the good requests ran


async def test_a_presets_file_replaces_the_built_in_ones(
    scripted_app: Callable[..., Any], testbed_tokens: Any, tmp_path: Path
) -> None:
    path = tmp_path / "presets.json"
    path.write_text(json.dumps({"fast": {"strategy": "elastic", "budget": {"thinking": 16}}}))
    async with scripted_app(_handler(testbed_tokens), presets=str(path)) as app:
        client = app.openai()
        r = await client.chat.completions.with_raw_response.create(
            model=f"{app.model}@fast", messages=MSG
        )
        assert r.headers["X-Budget-Applied"].startswith("thinking=16")
        assert [m.id for m in (await client.models.list()).data] == [app.model, f"{app.model}@fast"]
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model=f"{app.model}@auto-2s", messages=MSG)


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"bad name!": {}}',
        '{"p": {"strategy": "auto", "extra": 1}}',
        '{"p": {"budget": {"tokens": "many"}}}',
        '{"p": {"strategy": 3}}',
    ],
)
def test_a_malformed_presets_file_fails_start_up(tmp_path: Path, text: str) -> None:
    path = tmp_path / "presets.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="presets"):
        presets.load(str(path))
