"""The chat request that a body of another API (Responses, Anthropic Messages) becomes.

The pipeline (``server.pipeline.serving``) runs chat requests; the other routes validate their
own body, then build one here from the fields they mean. Body fields a route does not
know pass on as strategy options (``return_token_ids``, ``scorer`` ...), checked by the
strategy like chat's; a chat field the route has no place for (``messages`` on
/v1/responses, ``n``, ``max_completion_tokens`` ...) is a 400 naming it, never a second
way in. Errors found later name the route's own field (``renamed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import JsonValue, ValidationError

from core.errors import GatewayError, InvalidRequest
from server.apis.openai import sdk_fields
from server.apis.openai.protocol import UNSUPPORTED, ChatCompletionRequest
from server.apis.openai.validation import invalid

# Chat fields a route may also take under the same name (thinkgate's and vLLM's).
SHARED: Final = frozenset(
    {"model", "stream", "strategy", "budget", "seed", "top_k", "min_p", "repetition_penalty"}
)
_CHAT_ONLY: Final = (
    frozenset(ChatCompletionRequest.model_fields) | frozenset(UNSUPPORTED)
) - SHARED


def to_chat(
    route: str, fields: Mapping[str, object], extras: Mapping[str, JsonValue]
) -> ChatCompletionRequest:
    """The chat request of ``fields`` (chat field names; None: not set) plus the route's
    unknown body fields ``extras`` (strategy options, or a client's own fields, which the
    pipeline ignores; the route's refused fields are 400s here)."""
    sdk_fields.refuse_decided(sdk_fields.BY_ROUTE.get(route, {}), extras)
    for name in extras:
        if name in _CHAT_ONLY:
            raise InvalidRequest(
                f"unknown field {name!r} for {route} (a chat completions field)", param=name
            )
    body = {k: v for k, v in fields.items() if v is not None}
    body.update(extras)
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:  # a value the route's own model let through
        raise invalid(exc) from None


def renamed(err: GatewayError, renames: Mapping[str, str]) -> GatewayError:
    """``err`` naming the route's field where it names the chat field it became."""
    for chat_name, own in renames.items():
        if err.param is not None and (
            err.param == chat_name or err.param.startswith(f"{chat_name}.")
        ):
            err.param = own + err.param.removeprefix(chat_name)
            err.message = err.message.replace(chat_name, own, 1)
            break
    return err
