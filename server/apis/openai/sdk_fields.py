"""Where every field the OpenAI and Anthropic SDKs send goes: honoured, accepted and
ignored, or refused with a reason a user can act on.

The platforms add request fields every month, and a client library sends what its
platform takes. thinkgate's own namespace stays strict (a misspelt strategy option or
budget field is a 400 naming it), but a platform's field is decided here, once: a field
that changes nothing about the answer thinkgate gives (a storage, tracing or caching
hint) is accepted and ignored, and the response's ``X-Thinkgate-Ignored`` header lists the
ones a request set, so a client can see it; one whose meaning thinkgate cannot give
(audio, hosted tools, moderation) is a 400 saying so. ``tests/server/test_sdk_fields.py``
introspects the installed SDKs' ``create()`` signatures: a field a new SDK release adds
fails the suite until it is decided here. docs/apis.md has the tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from core.errors import InvalidRequest

Decision = Literal["honoured", "ignored", "refused"]


@dataclass(frozen=True, slots=True)
class Decided:
    decision: Decision
    note: str = ""  # what it does here, or why it is refused


def _h(note: str = "") -> Decided:
    return Decided("honoured", note)


def _i(note: str) -> Decided:
    return Decided("ignored", note)


def _r(note: str) -> Decided:
    return Decided("refused", note)


_PLATFORM = "a platform hint (storage, tracing, routing): nothing changes here"
_CACHE = "vLLM's prefix cache keeps what it can: nothing more to ask"

CHAT: Final[Mapping[str, Decided]] = {
    "messages": _h(),
    "model": _h("the served model (or a preset)"),
    "audio": _r("no audio output: the served model writes text"),
    "frequency_penalty": _h(),
    "function_call": _r("the deprecated functions API: send tools and tool_choice"),
    "functions": _r("the deprecated functions API: send tools and tool_choice"),
    "logit_bias": _h(),
    "logprobs": _h(),
    "max_completion_tokens": _h(),
    "max_tokens": _h(),
    "metadata": _i(_PLATFORM),
    "modalities": _h('["text"] only: no audio'),
    "moderation": _r("thinkgate runs no moderation model; moderate before or after it"),
    "n": _h(),
    "parallel_tool_calls": _h(),
    "prediction": _i("a latency hint: the answer is the same without it"),
    "presence_penalty": _h(),
    "prompt_cache_key": _i(_CACHE),
    "prompt_cache_options": _i(_CACHE),
    "prompt_cache_retention": _i(_CACHE),
    "reasoning_effort": _h("a thinking budget, alone a whole auto plan"),
    "response_format": _h(),
    "safety_identifier": _i(_PLATFORM),
    "seed": _h(),
    "service_tier": _i(_PLATFORM),
    "stop": _h(),
    "store": _i("chat completions are not stored (the Responses API stores)"),
    "stream": _h(),
    "stream_options": _h("include_usage; include_obfuscation is ignored"),
    "temperature": _h(),
    "tool_choice": _h(),
    "tools": _h("function tools"),
    "top_logprobs": _h(),
    "top_p": _h(),
    "user": _i(_PLATFORM),
    "verbosity": _i("the served model is not asked to write shorter or longer"),
    "web_search_options": _r("thinkgate cannot search the web: offer a search tool instead"),
}

COMPLETIONS: Final[Mapping[str, Decided]] = {
    "model": _h(),
    "prompt": _h(),
    "best_of": _r("best_of above 1: use X-Strategy: best-of-n"),
    "echo": _h(),
    "frequency_penalty": _h(),
    "logit_bias": _h(),
    "logprobs": _h(),
    "max_tokens": _h(),
    "n": _h(),
    "presence_penalty": _h(),
    "seed": _h(),
    "stop": _h(),
    "stream": _h(),
    "stream_options": _h("include_usage; include_obfuscation is ignored"),
    "suffix": _r("insertion (suffix) is not supported by the served model's route"),
    "temperature": _h(),
    "top_p": _h(),
    "user": _i(_PLATFORM),
}

_STATEFUL = "thinkgate keeps no conversation state; send the whole input"

RESPONSES: Final[Mapping[str, Decided]] = {
    "access_programs": _i(_PLATFORM),
    "background": _r("background mode needs stored responses"),
    "background_options": _r("background mode needs stored responses"),
    "context_management": _i("no server-side compaction: the input is used as sent"),
    "conversation": _r(_STATEFUL),
    "image": _i("no image generation here: the option has nothing to act on"),
    "include": _h("reasoning.encrypted_content; the rest add nothing here"),
    "input": _h(),
    "instructions": _h(),
    "max_output_tokens": _h(),
    "max_tool_calls": _i("one turn makes the calls of one answer"),
    "metadata": _h("echoed in the response"),
    "model": _h(),
    "moderation": _r("thinkgate runs no moderation model; moderate before or after it"),
    "parallel_tool_calls": _h(),
    "previous_response_id": _h("continues a stored response (server.apis.responses.store)"),
    "prompt": _r("stored prompt templates need stored state"),
    "prompt_cache_key": _i(_CACHE),
    "prompt_cache_options": _i(_CACHE),
    "prompt_cache_retention": _i(_CACHE),
    "reasoning": _h("effort; a summary asked for is the reasoning text (no summariser)"),
    "safety_identifier": _i(_PLATFORM),
    "service_tier": _i(_PLATFORM),
    "store": _h("true or omitted: kept (--response-retention-s); false: not"),
    "stream": _h(),
    "stream_options": _i("include_obfuscation: nothing to pad"),
    "temperature": _h(),
    "text": _h("format; verbosity is ignored"),
    "tool_choice": _h(),
    "tools": _h("function tools, and the functions of a namespace group"),
    "top_logprobs": _r("logprobs are not returned on this route"),
    "top_p": _h(),
    "truncation": _i("the input is never truncated: one too long is a 400"),
    "user": _i(_PLATFORM),
}

MESSAGES: Final[Mapping[str, Decided]] = {
    "max_tokens": _h("thinking included"),
    "messages": _h("user, assistant and system turns"),
    "model": _h(),
    "cache_control": _i(_CACHE),
    "container": _r("server tools (code execution) are not run by thinkgate"),
    "diagnostics": _i(_PLATFORM),
    "inference_geo": _i(_PLATFORM),
    "metadata": _i(_PLATFORM),
    "output_config": _h("effort (an auto plan) and format (structured output)"),
    "service_tier": _i(_PLATFORM),
    "speed": _i("one speed here: the engine's"),
    "stop_sequences": _h(),
    "stream": _h(),
    "system": _h(),
    "thinking": _h("enabled (a budget), adaptive (the server plans), disabled; display"),
    "tool_choice": _h(),
    "tools": _h("client tools; defer_loading and cache_control are accepted"),
    "user_profile_id": _i(_PLATFORM),
    "workspace_id": _i(_PLATFORM),
    # In the beta namespace (client.beta.messages.create), which harnesses use.
    "context_management": _h("clear_thinking_20251015 applied to the prompt"),
    "mcp_servers": _r("MCP servers are not run by thinkgate: offer their tools as client tools"),
    "compaction": _i("no server-side compaction: the messages are used as sent"),
    "fallbacks": _i("one model here: no fallback to another"),
    "fallback_credit_token": _i(_PLATFORM),
    "billing_policy": _i(_PLATFORM),
    "thread": _r("thinkgate keeps no threads: send the whole conversation in messages"),
    # Not in the 2.15 SDK's create() any more, still sent by older clients.
    "temperature": _h(),
    "top_p": _h(),
    "top_k": _h(),
}

APIS: Final[Mapping[str, Mapping[str, Decided]]] = {
    "chat.completions": CHAT,
    "completions": COMPLETIONS,
    "responses": RESPONSES,
    "messages": MESSAGES,
}

HEADER: Final = "X-Thinkgate-Ignored"
# The Responses and Messages routes' tables, by route (their unknown fields reach the chat
# request as extras: server.apis.chat_translation).
BY_ROUTE: Final[Mapping[str, Mapping[str, Decided]]] = {
    "/v1/responses": RESPONSES,
    "/v1/messages": MESSAGES,
}


def refuse_decided(table: Mapping[str, Decided], fields: Iterable[str]) -> None:
    """A 400 naming the first of ``fields`` that ``table`` refuses, and why. Checked
    before unknown fields are ignored: a refused field is decided, not unknown."""
    for field in sorted(fields):
        decided = table.get(field)
        if decided is not None and decided.decision == "refused":
            raise InvalidRequest(
                f"{field} is not supported by thinkgate: {decided.note}", param=field
            )


def ignored(table: Mapping[str, Decided], present: Iterable[str]) -> tuple[str, ...]:
    """The fields among ``present`` (those a request set) that ``table`` ignores, sorted."""
    return tuple(sorted(k for k in set(present) if (d := table.get(k)) and d.decision == "ignored"))


# --- the parts inside requests: messages, content blocks, tools, items, choices
#
# Keyed by API part, then by the part's wire ``type`` (or a message's ``role``). An
# honoured part is read by the route's model of it (tests/server/test_sdk_fields.py
# checks that model holds every key the SDK's type has, or ``PART_FIELDS`` decides it);
# an ignored one is left out and named in ``X-Thinkgate-Ignored``; a refused one is a
# 400 saying why.

_TEXT_ONLY = "the served model reads text: describe the {} in text"
_NO_SERVER_TOOLS = "thinkgate runs no server tools: a client tool's call and result are"
_NO_HOSTED = "thinkgate runs no hosted tools: function calls and their outputs are"
_ASK_TOOL = "left out of the prompt: thinkgate runs no server tools"


def _server_tool_results(*kinds: str) -> dict[str, Decided]:
    return {k: _r(f"{k} blocks: {_NO_SERVER_TOOLS}") for k in kinds}


def _hosted_items(*kinds: str) -> dict[str, Decided]:
    return {k: _r(f"{k} items: {_NO_HOSTED}") for k in kinds}


PARTS: Final[Mapping[str, Mapping[str, Decided]]] = {
    "messages.role": {"user": _h(), "assistant": _h(), "system": _h("a system message there")},
    "messages.content": {
        "text": _h(),
        "thinking": _h("the turn's thinking, read from its signature"),
        "redacted_thinking": _h("opaque: dropped from the prompt"),
        "tool_use": _h("the turn's calls"),
        "tool_result": _h("the tools' results"),
        "image": _r(_TEXT_ONLY.format("image")),
        "document": _r(_TEXT_ONLY.format("document") + " (its text as a text block)"),
        "search_result": _r("search_result blocks: send the result's text as a text block"),
        "container_upload": _r("container_upload blocks: thinkgate runs no code containers"),
        **_server_tool_results(
            "server_tool_use",
            "web_search_tool_result",
            "web_fetch_tool_result",
            "code_execution_tool_result",
            "bash_code_execution_tool_result",
            "text_editor_code_execution_tool_result",
            "tool_search_tool_result",
        ),
    },
    # A client tool (``custom`` or no type) is honoured; any other type (a name, often
    # dated: web_search_20250305, bash_20250124, ...) is a server tool, left out.
    "messages.tools": {"custom": _h("a function tool"), "server": _i(_ASK_TOOL)},
    "messages.thinking": {
        "enabled": _h("the thinking budget"),
        "disabled": _h("a thinking budget of 0"),
        "adaptive": _h("the server plans the thinking"),
        "between_tools": _r(
            "thinking only between tool calls is not offered: send adaptive or enabled"
        ),
    },
    "messages.tool_choice": {"auto": _h(), "any": _h(), "tool": _h(), "none": _h()},
    "chat.role": {
        "developer": _h("a system message"),
        "system": _h(),
        "user": _h(),
        "assistant": _h(),
        "tool": _h(),
        "function": _r("the deprecated functions API: send tool messages"),
    },
    "chat.content": {
        "text": _h(),
        "image_url": _r(_TEXT_ONLY.format("image")),
        "input_audio": _r(_TEXT_ONLY.format("audio")),
        "file": _r(_TEXT_ONLY.format("file") + " (its text as a text part)"),
    },
    "chat.tools": {
        "function": _h(),
        "custom": _r("custom (free-form) tools: offer a function tool with a JSON schema"),
    },
    "chat.tool_choice": {
        "function": _h("a named function"),
        "allowed_tools": _r("allowed_tools: send the allowed tools as tools"),
        "custom": _r("custom (free-form) tools: offer a function tool with a JSON schema"),
    },
    "chat.response_format": {"text": _h(), "json_object": _h(), "json_schema": _h()},
    "responses.input": {
        "message": _h(),
        "function_call": _h("the assistant's call"),
        "function_call_output": _h("the tool's result"),
        "reasoning": _h("the turn's thinking (sealed or in the clear)"),
        "item_reference": _h("an item of the tenant's stored responses, by id"),
        "compaction": _r("compaction items: no server-side compaction here"),
        "compaction_trigger": _r("compaction items: no server-side compaction here"),
        "configuration_update": _r("configuration_update items: send the request's fields"),
        "additional_tools": _r("additional_tools items: send the tools in tools"),
        "custom_tool_call": _r("custom (free-form) tools: offer a function tool"),
        "custom_tool_call_output": _r("custom (free-form) tools: offer a function tool"),
        **_hosted_items(
            "file_search_call",
            "computer_call",
            "computer_call_output",
            "web_search_call",
            "tool_search_call",
            "tool_search_output",
            "image_generation_call",
            "code_interpreter_call",
            "local_shell_call",
            "local_shell_call_output",
            "shell_call",
            "shell_call_output",
            "apply_patch_call",
            "apply_patch_call_output",
            "mcp_list_tools",
            "mcp_approval_request",
            "mcp_approval_response",
            "mcp_call",
            "program",
            "program_output",
        ),
    },
    "responses.content": {
        "input_text": _h(),
        "output_text": _h("an answer given back"),
        "input_image": _r(_TEXT_ONLY.format("image")),
        "input_file": _r(_TEXT_ONLY.format("file") + " (its text as input_text)"),
        "refusal": _r("refusal parts: thinkgate's answers carry none; send output_text"),
    },
    # Function tools and namespace groups are honoured; every other type is a hosted
    # tool, left out (server.apis.responses.tools.functions_of).
    "responses.tools": {
        "function": _h(),
        "namespace": _h("its functions"),
        "hosted": _i("left out of the prompt: thinkgate runs no hosted tools"),
    },
    "responses.tool_choice": {
        "function": _h("a named function"),
        "allowed_tools": _r("allowed_tools: send the allowed tools as tools"),
        "custom": _r("custom (free-form) tools: offer a function tool"),
        "mcp": _r("MCP servers are not run by thinkgate"),
        "hosted": _r("it forces a hosted tool, which thinkgate does not run"),
    },
}

# Keys inside an honoured part that its model takes without acting on them (or refuses),
# by part and type.
PART_FIELDS: Final[Mapping[str, Mapping[str, Decided]]] = {
    "chat.role.assistant": {
        "refusal": _i("an assistant turn's refusal: its content is what the model reads"),
        "audio": _r("no audio: an assistant turn's audio cannot be given back"),
        "function_call": _r("the deprecated functions API: send tool_calls"),
    },
    "chat.content.text": {"prompt_cache_breakpoint": _i(_CACHE)},
    "responses.content.input_text": {"prompt_cache_breakpoint": _i(_CACHE)},
    "responses.input.function_call": {
        "async": _i("the call is answered by its output item either way"),
        "caller": _i("who made the call: the call is the call either way"),
        "namespace": _i("the function's group: its name is the function's"),
    },
    "responses.input.function_call_output": {
        "caller": _i("who made the call: the output answers its call_id"),
        "name": _i("the output answers its call_id"),
        "namespace": _i("the output answers its call_id"),
    },
}


def part_ignored(where: str, part: str, items: Iterable[object]) -> tuple[str, ...]:
    """``where.key`` for each key ``PART_FIELDS[part]`` ignores that one of ``items``
    (decoded JSON objects) sets, sorted: what ``X-Thinkgate-Ignored`` adds for them."""
    table = PART_FIELDS[part]
    found = {
        key
        for item in items
        if isinstance(item, Mapping)
        for key, value in item.items()
        if value is not None and (d := table.get(key)) is not None and d.decision == "ignored"
    }
    return tuple(f"{where}.{key}" for key in sorted(found))


def refuse_part(part: str, value: object, *, label: str = "") -> object:
    """``value`` as it is, or (its ``type`` refused by ``PARTS[part]``) a ValueError saying
    why: the body of a model's before-validator (``label``: what the message calls it)."""
    kind = value.get("type") if isinstance(value, dict) else None
    if (why := part_refused(part, kind)) is not None:
        raise ValueError(f"{kind} {label}: {why}" if label else why)
    return value


def part_refused(part: str, kind: object) -> str | None:
    """Why ``PARTS[part]`` refuses a part of ``kind`` (None: it does not)."""
    decided = PARTS[part].get(kind) if isinstance(kind, str) else None
    return decided.note if decided is not None and decided.decision == "refused" else None
