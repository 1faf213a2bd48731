"""Reasoning formats: which strings open and close a model's thinking.

The one table of presets (setting ``reasoning_format``, flag ``--reasoning-format``).
Each string is resolved by the tokenizer at start-up (``engines.tokens``): one
vocab token when it is one, else the token sequence it encodes to. Explicit
``think_start``/``think_end`` settings override the preset's strings.

Kept import-light (no torch, no vLLM): ``server.settings`` validates against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningFormat:
    """The delimiters of thinking in a model's output."""

    think_start: str
    think_end: str
    summary: str  # one line for the docs and --help
    # vLLM's reasoning parser for these delimiters: it tells the engine's grammar
    # (``response_format``) where thinking ends and the answer starts.
    vllm_reasoning_parser: str


REASONING_FORMATS: Final[dict[str, ReasoningFormat]] = {
    # DeepSeek-R1 distills, Qwen3, the testbed: <think> ... </think> (usually one token each).
    "think-tags": ReasoningFormat(
        think_start="<think>",
        think_end="</think>",
        summary="<think> ... </think> (R1 distills, Qwen3, the testbed)",
        vllm_reasoning_parser="deepseek_r1",
    ),
    # gpt-oss (harmony): thinking is the analysis channel, opened by
    # ``<|channel|>analysis<|message|>`` and ended by ``<|end|>``; the answer is the final
    # channel, opened by ``<|start|>assistant<|channel|>final<|message|>``. ``<|end|>``
    # alone also ends commentary/tool messages, so the end delimiter is the whole hand-over
    # from analysis to the final answer: what follows it is the answer, and forcing it
    # (Elastic Reasoning) leaves the model inside the final channel.
    "harmony": ReasoningFormat(
        think_start="<|channel|>analysis<|message|>",
        think_end="<|end|><|start|>assistant<|channel|>final<|message|>",
        summary="gpt-oss: the analysis channel, up to the opening of the final channel",
        vllm_reasoning_parser="openai_gptoss",
    ),
}

DEFAULT_FORMAT: Final = "think-tags"


def reasoning_format(name: str) -> ReasoningFormat:
    """The preset called ``name``; ValueError listing the known ones otherwise."""
    try:
        return REASONING_FORMATS[name]
    except KeyError:
        known = ", ".join(REASONING_FORMATS)
        raise ValueError(f"unknown reasoning format {name!r}; known: {known}") from None
