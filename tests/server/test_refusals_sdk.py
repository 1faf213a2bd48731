"""What the gateway refuses before any engine call, as the real SDKs see it, in the fast
tier: the OpenAI SDK (chat options, the Responses API) and the Anthropic SDK (Messages)
against the app of ``thinkgate serve`` over ASGI, with a scripted engine that fails the
test if it is called. (Behaviour that needs an engine stays in the live suites.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from core.engine import GenerateRequest
from testbed.task import make_questions

EASY = make_questions("test", 1, seed=3, min_ops=1, max_ops=2)[0].prompt
MESSAGES = [{"role": "user", "content": EASY}]


def _never(request: GenerateRequest) -> Any:
    raise AssertionError(f"a refused request reached the engine: {request.request_id}")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"background": True}, "background"),
        # A hosted tool is left out of the prompt (X-Thinkgate-Ignored); forced, a 400.
        ({"tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"extra_body": {"alhpa": 0.1}}, "alhpa"),
        ({"extra_body": {"max_output_tokens": "many"}}, "max_output_tokens"),
    ],
)
async def test_responses_refusals_are_400s_naming_the_field(
    scripted_app: Callable[..., Any], extra: dict[str, Any], param: str
) -> None:
    async with scripted_app(_never) as app:
        with pytest.raises(openai.BadRequestError) as info:
            await app.openai().responses.create(model=app.model, input=EASY, **extra)
        assert app.engine.calls == []
    assert info.value.body["param"] == param  # type: ignore[index]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"extra_body": {"alhpa": 0.1}}, "alhpa"),
        (
            {
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                "tool_choice": {"type": "tool", "name": "web_search"},
            },
            "server tool",
        ),
        ({"thinking": {"type": "enabled", "budget_tokens": 64}}, "budget_tokens"),
        ({"extra_body": {"temperature": 3.0}}, "temperature"),
    ],
)
async def test_messages_refusals_are_400s_in_anthropics_envelope(
    scripted_app: Callable[..., Any], extra: dict[str, Any], words: str
) -> None:
    async with scripted_app(_never) as app:
        claude = app.anthropic()
        with pytest.raises(anthropic.BadRequestError) as info:
            await claude.messages.create(model=app.model, max_tokens=64, messages=MESSAGES, **extra)
        assert app.engine.calls == []
    body = info.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert words in body["error"]["message"]


async def test_an_option_of_another_strategy_is_a_400_naming_it(
    scripted_app: Callable[..., Any],
) -> None:
    async with scripted_app(_never) as app:
        client = app.openai()
        with pytest.raises(openai.BadRequestError) as foreign:
            await client.chat.completions.create(
                model=app.model,
                messages=MESSAGES,
                max_tokens=4,
                extra_body={"strategy": "self-consistency", "alpha": 0.1},
            )
        assert app.engine.calls == []
    error: Any = foreign.value.body
    assert error["param"] == "alpha" and "option of best-of-majority" in error["message"]
