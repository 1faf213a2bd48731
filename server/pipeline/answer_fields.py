"""What a client asked its answer to carry beyond text, checked against the strategy
and the server before any engine call: logprobs (and completions' ``echo``), a JSON
format (``response_format``), tool calls (``tools``, ``tool_choice``). Each is a 400
naming the field where the strategy or the server cannot honour it, never dropped."""

from __future__ import annotations

import json

from core.base import Strategy
from core.engine import StructuredOutput
from core.errors import InvalidRequest
from server.apis.openai.chat_parts import NamedToolChoice, structured_output
from server.apis.openai.protocol import ChatCompletionRequest, CompletionRequest, OpenAIBody
from server.gateway import Gateway
from strategies.tool_calls import CallForm


def logprobs_asked(body: OpenAIBody, strategy: Strategy, name: str) -> tuple[int | None, bool]:
    """(alternatives per token the client asked for or None, echo), refused with a 400
    naming the field where this strategy or this request cannot honour them."""
    client_k = body.client_logprobs()
    echo = isinstance(body, CompletionRequest) and body.echo
    if client_k is not None and not getattr(strategy, "returns_logprobs", False):
        raise InvalidRequest(
            f"logprobs are not returned by the {name} strategy: its answer is not one sampled "
            "trajectory; use plain, a sampling strategy (self-consistency, best-of-n, "
            "best-of-majority), pets or deepconf",
            param="logprobs",
        )
    if echo and body.stream:
        raise InvalidRequest("echo is not streamed; send it with stream: false", param="echo")
    if echo and client_k is not None and not getattr(strategy, "returns_prompt_logprobs", False):
        raise InvalidRequest(
            f"echo with logprobs (the prompt's logprobs) is answered by plain, not by {name}",
            param="echo",
        )
    return client_k, echo


def format_asked(
    gw: Gateway, body: OpenAIBody, strategy: Strategy, name: str
) -> StructuredOutput | None:
    """The answer's grammar (chat's ``response_format``), refused with a 400 naming it
    where this strategy or this server cannot hold its answer to it."""
    if not isinstance(body, ChatCompletionRequest):
        return None
    structured = structured_output(body.response_format)
    if structured is None:
        return None
    if not getattr(strategy, "honours_response_format", False):
        raise InvalidRequest(
            f"response_format is not applied by the {name} strategy; use plain, elastic, "
            "budget-guidance, pets, a sampling strategy (self-consistency, best-of-n, "
            "best-of-majority) or a step search (beam-search, particle-filtering, dvts, "
            "step-rejection)",
            param="response_format",
        )
    if gw.settings.reasoning and not gw.settings.grammar_reasoning_parser:
        raise InvalidRequest(
            "response_format needs a vLLM reasoning parser for this model's think strings "
            "(start the server with --reasoning-parser NAME): without one the grammar "
            "would hold the thinking to the format too",
            param="response_format",
        )
    return structured


def tools_asked(
    gw: Gateway,
    body: OpenAIBody,
    strategy: Strategy,
    name: str,
    structured: StructuredOutput | None,
) -> tuple[CallForm | None, StructuredOutput | None]:
    """How the answers may hold tool calls (chat's ``tools``; None: they may not) and the
    grammar a forced ``tool_choice`` (or ``tools`` with a ``response_format``) holds them
    to, in place of ``structured``; a 400 naming the field where this
    strategy or this request cannot have them."""
    if not isinstance(body, ChatCompletionRequest):
        return None, None
    choice = body.tool_choice
    if choice is not None and not body.tools:
        raise InvalidRequest("tool_choice needs tools", param="tool_choice")
    offered = body.offered_tools()
    if not offered:
        return None, None
    if not getattr(strategy, "honours_tools", False):
        raise InvalidRequest(
            f"tools are not offered under the {name} strategy; use a built-in one (plain, "
            "elastic, budget-guidance, deepconf, pets, the sampling strategies, the step "
            "searches)",
            param="tools",
        )
    single = body.parallel_tool_calls is False
    tools = {t.function.name: t.function.parameters or {"type": "object"} for t in body.tools or []}
    if (choice is None or choice == "auto") and structured is None:
        return CallForm("tags", single=single), None
    # Held to a grammar from here: a forced call, or (auto with a format) a call or an
    # answer in the format, as OpenAI serves both.
    # The answer is held to JSON by the engine's grammar (as vLLM's server does), after
    # thinking, like response_format.
    if structured is not None and (choice is None or choice == "auto"):
        what, param = "tools with response_format", "response_format"
        instead = " without the format"
    else:
        what, param = f"tool_choice {_choice_name(choice)}", "tool_choice"
        instead = ""
    if not getattr(strategy, "honours_response_format", False):
        raise InvalidRequest(
            f"{what} holds the answer to a grammar, which the {name} strategy does not "
            f"apply; send tool_choice auto{instead}",
            param=param,
        )
    if gw.settings.reasoning and not gw.settings.grammar_reasoning_parser:
        raise InvalidRequest(
            f"{what} needs a vLLM reasoning parser for this model's think strings (start "
            "the server with --reasoning-parser NAME)",
            param=param,
        )
    calls: dict[str, object] = {
        "type": "array",
        "minItems": 1,
        **({"maxItems": 1} if single else {}),
        "items": {"anyOf": [_call_schema(n, p) for n, p in tools.items()]},
    }
    if isinstance(choice, NamedToolChoice):
        if choice.function.name not in tools:
            raise InvalidRequest(
                f"tool_choice names {choice.function.name!r}, which is not among the tools",
                param="tool_choice",
            )
        schema: dict[str, object] = dict(tools[choice.function.name])
        form = CallForm("named", choice.function.name)
    elif choice == "required" or structured is None:
        schema, form = calls, CallForm("required", single=single)
    else:
        # The calls' array or the answer's own format; a forced call (above) has no answer
        # to format.
        answer = json.loads(structured.schema) if structured.schema else {"type": "object"}
        schema, form = {"anyOf": [calls, answer]}, CallForm("either", single=single)
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return form, StructuredOutput(kind="json_schema", schema=text)


def _call_schema(name: str, parameters: object) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {"name": {"type": "string", "enum": [name]}, "parameters": parameters},
        "required": ["name", "parameters"],
        "additionalProperties": False,
    }


def _choice_name(choice: object) -> str:
    return f"naming {choice.function.name!r}" if isinstance(choice, NamedToolChoice) else "required"
