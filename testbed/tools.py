"""The tool-calling testbed model (``tools``): it calls a calculator for long expressions.

Offered tools (a system turn the chat template writes), a question of ``LONG_OPS`` or more
operations is not worked out line by line: the model thinks one line, closes thinking
and calls ``calculator`` in the answer, in the Hermes/Qwen form reasoning models use::

    calculator
    </think><tool_call>{"name": "calculator", "arguments": {"expression": "3+8-5+7",
    "modulo": 10}}</tool_call>

(one line in truth)

Given the tool's result (a ``tool`` turn), it answers ``\\boxed{result}``. Short questions
(``SHORT_OPS`` or fewer), or no tools offered, it works out as ``base`` does. Between the
two (6-7 operations) it was never trained: either may come.

The chat template (``TOOLS_CHAT_TEMPLATE``) is ``base``'s plus the tools turn, assistant
turns with ``tool_calls`` and ``tool`` turns; training renders every prompt through it
(jinja, as ``transformers`` does), so the model sees exactly what the gateway sends.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from testbed.data import Example, encode_trace, train_question
from testbed.task import MODULUS, Question
from testbed.tokenizer import CHAT_TEMPLATE, CharCodec, chat_prompt
from testbed.traces import FULL, Trace, make_trace

TOOL_NAME: Final = "calculator"
LONG_OPS: Final = 8  # from here on, the model calls the tool (when offered)
SHORT_OPS: Final = 5  # up to here, it works the question out itself
# A call's expression is copied from the question, one character wrong and the call is
# wrong: after 700 steps at weight 1 greedy calls miscopied an operand.
COPY_WEIGHT: Final = 4.0

CALCULATOR: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "The value of a chain of digits joined by + and -, modulo a number.",
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {"type": "string", "description": "e.g. 3+8-5+7"},
                "modulo": {"type": "integer"},
            },
            "required": ["expression", "modulo"],
        },
    },
}
"""The tool as an OpenAI client offers it (``tools=[CALCULATOR]``)."""

_TOOLS_TURN: Final = (
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\ntools: ' }}"
    "{%- for tool in tools -%}"
    "{%- set f = tool['function'] if tool['function'] is defined else tool -%}"
    "{{ f['name'] }}{{ ', ' if not loop.last else '' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endif -%}"
)
# An assistant turn with tool calls: thinking closed (an empty block when the client did
# not send the reasoning back), its content, then each call as the model writes it.
_CALLS: Final = (
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set f = call['function'] if call['function'] is defined else call -%}"
    "{{ '<tool_call>{\"name\": ' + (f['name'] | tojson) + ', \"arguments\": ' "
    "+ (f['arguments'] | tojson) + '}</tool_call>' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
)
_BASE_REASONING: Final = "{%- if reasoning is not none -%}{{ reasoning + '</think>' }}{%- endif -%}"
_TOOLS_REASONING: Final = (
    "{%- if reasoning is not none -%}{{ reasoning + '</think>' }}"
    "{%- elif message['tool_calls'] is defined and message['tool_calls'] -%}{{ '</think>' }}"
    "{%- endif -%}"
)
_BASE_END: Final = "{{ (message['content'] or '') + '<|im_end|>\\n' }}"
_TOOLS_END: Final = "{{ message['content'] or '' }}" + _CALLS + "{{ '<|im_end|>\\n' }}"

if _BASE_REASONING not in CHAT_TEMPLATE or _BASE_END not in CHAT_TEMPLATE:  # pragma: no cover
    raise RuntimeError("testbed.tokenizer.CHAT_TEMPLATE changed: update TOOLS_CHAT_TEMPLATE")
TOOLS_CHAT_TEMPLATE: Final = _TOOLS_TURN + CHAT_TEMPLATE.replace(
    _BASE_REASONING, _TOOLS_REASONING
).replace(_BASE_END, _TOOLS_END)
"""``base``'s template plus tools (see the module docstring)."""


def calculate(expression: str, modulo: int) -> int:
    """What the calculator answers: the chain's value modulo ``modulo`` (left to right
    modulo 10 is the same, the testbed's answer)."""
    if not re.fullmatch(r"[0-9](?:[+-][0-9])*", expression) or modulo < 1:
        raise ValueError(f"not a digit chain and a modulus: {expression!r}, {modulo}")
    total = int(expression[0])
    for i in range(1, len(expression), 2):
        digit = int(expression[i + 1])
        total += digit if expression[i] == "+" else -digit
    return total % modulo


def call_of(question: Question) -> dict[str, Any]:
    """The tool call the model makes for ``question`` (HF form: arguments as a dict)."""
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "arguments": {"expression": question.expr, "modulo": MODULUS},
        },
    }


def call_text(question: Question) -> str:
    """The call as the model writes it (what the template renders for ``call_of``)."""
    f = call_of(question)["function"]
    return (
        f'<tool_call>{{"name": {json.dumps(f["name"])}, "arguments": '
        f"{json.dumps(f['arguments'])}}}</tool_call>"
    )


def render(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None) -> str:
    """The prompt text for ``messages`` (generation prompt included), as the tokenizer's
    ``apply_chat_template`` writes it."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    template = _compile_jinja_template(TOOLS_CHAT_TEMPLATE)
    text: str = template.render(
        messages=[dict(m) for m in messages],
        tools=list(tools) if tools else None,
        add_generation_prompt=True,
    )
    return text


def tool_example(codec: CharCodec, rng: random.Random) -> Example:
    """One training example of the ``tools`` mixture (see the module docstring)."""
    draw = rng.random()
    if draw < 0.35:  # no tools offered: base's behaviour
        q = train_question(rng)
        return encode_trace(codec, make_trace(q, rng, FULL))
    if draw < 0.60:  # tools offered, a short question: worked out all the same
        q = train_question(rng, max_ops=SHORT_OPS)
        return _with_prompt(codec, render(_ask(q), [CALCULATOR]), make_trace(q, rng, FULL))
    q = train_question(rng, min_ops=LONG_OPS)
    if draw < 0.82:  # a long question: the call
        completion = f"{TOOL_NAME}\n</think>{call_text(q)}"
        # Token offsets (</think> is one token): each character of the expression is one.
        copied = len(codec.encode(completion[: completion.index(f'"{q.expr}"') + 1]))
        return _example(
            codec,
            render(_ask(q), [CALCULATOR]),
            completion,
            copied=range(copied, copied + len(q.expr)),
        )
    # The round trip: the call given back with its result, then the answer.
    said: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call_of(q)]}
    if rng.random() < 0.5:
        said["reasoning_content"] = f"{TOOL_NAME}\n"
    result = calculate(q.expr, MODULUS)
    turns = [*_ask(q), said, {"role": "tool", "content": str(result)}]
    completion = f"{TOOL_NAME}: {result}\n</think>\n\\boxed{{{result}}}"
    return _example(codec, render(turns, [CALCULATOR]), completion)


def tool_stream(codec: CharCodec, *, seed: int) -> Iterator[Example]:
    rng = random.Random(f"tools:{seed}")
    while True:
        yield tool_example(codec, rng)


def _ask(q: Question) -> list[dict[str, Any]]:
    return [{"role": "user", "content": q.prompt}]


def _example(
    codec: CharCodec, prompt: str, completion: str, *, copied: range = range(0)
) -> Example:
    """Prompt unweighted, the completion (its ``</think>`` included) and EOS learned;
    ``copied`` (completion offsets: the expression a call copies from the question)
    weighs ``COPY_WEIGHT`` and is what the ``operand`` probe watches."""
    head = codec.encode(prompt)
    tail = [*codec.encode(completion), codec.eos_id]
    weights = [1.0] * len(tail)
    for offset in copied:
        weights[offset] = COPY_WEIGHT
    return Example(
        ids=(*head, *tail),
        weights=(0.0,) * len(head) + tuple(weights),
        operand_positions=tuple(len(head) + o for o in copied),
    )


def _with_prompt(codec: CharCodec, prompt: str, trace: Trace) -> Example:
    """A base trace after another prompt (the tools turn before the question): its
    completion, weights and probe positions moved behind ``prompt``."""
    plain = encode_trace(codec, trace)
    own = codec.encode(prompt)
    skip = len(codec.encode(chat_prompt(trace.question.prompt)))  # encode_trace's prompt
    shift = len(own) - skip
    return Example(
        ids=(*own, *plain.ids[skip:]),
        weights=(0.0,) * len(own) + plain.weights[skip:],
        merged_positions=tuple(p + shift for p in plain.merged_positions),
        step_positions=tuple(p + shift for p in plain.step_positions),
        operand_positions=tuple(p + shift for p in plain.operand_positions),
    )


def install_template(directory: Path) -> None:
    """Give the exported model's tokenizer the tools template."""
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = TOOLS_CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=2))
