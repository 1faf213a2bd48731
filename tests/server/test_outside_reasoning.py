"""Multi-token think delimiters on a real BPE model, end to end.

SmolLM2-135M-Instruct has no ``<think>`` tokens: served as a reasoning model with the
default strings, ``</think>`` is a sequence of three BPE tokens there. With a thinking
budget t, Elastic Reasoning must force the whole sequence once, token for token, within
t + len(sequence) tokens, and the answer must follow within the solution budget; the
reasoning split and ``reasoning_tokens`` must match a count made here from token ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

T, S = 10, 12


# ``thinkgate serve --model <outside model>`` with these flags: launched beside
# test_outside_model.py's gateway, the two loading together (tests/conftest.py).
OUTSIDE_GATEWAY_FLAGS = (
    "--think-start", "<think>", "--think-end", "</think>", "--max-model-len", "1024",
)  # fmt: skip


@pytest.fixture(scope="module")
def smol(outside_gateway: Any) -> Any:
    return outside_gateway


@pytest.fixture(scope="module")
def tokenizer(outside_model: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(outside_model))


def _find(ids: list[int], seq: list[int]) -> list[int]:
    return [i for i in range(len(ids) - len(seq) + 1) if ids[i : i + len(seq)] == seq]


def test_the_end_sequence_is_forced_once_and_the_answer_follows(smol: Any, tokenizer: Any) -> None:
    end = tokenizer.encode("</think>", add_special_tokens=False)
    assert len(end) > 1, end  # the point of this module: a sequence, not a token
    prompt = tokenizer.encode("Question: what is 2+3? Answer: ", add_special_tokens=False)
    prompt += tokenizer.encode("<think>", add_special_tokens=False)  # thinking left open
    client = openai.OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused", max_retries=0)
    r = client.completions.create(
        model=smol.model,
        prompt=prompt,
        max_tokens=200,
        temperature=0,
        extra_headers={"X-Budget-Thinking": str(T), "X-Budget-Solution": str(S)},
        extra_body={"return_token_ids": True},
    )
    choice = r.choices[0]
    extra: dict[str, Any] = choice.model_extra or {}
    ids: list[int] = extra["thinkgate"]["token_ids"]
    at = _find(ids, end)
    assert len(at) == 1, (ids, end)  # exactly once, token for token
    e = at[0]
    assert e <= T  # forced at t at the latest: closed within t + len(sequence) tokens
    answer = ids[e + len(end) :]
    eos = set(tokenizer.all_special_ids)
    assert len([t for t in answer if t not in eos]) <= S
    assert r.usage is not None and r.usage.completion_tokens == len(ids)
    details = r.usage.completion_tokens_details
    assert details is not None and details.reasoning_tokens == e
    reasoning = extra.get("reasoning_content") or ""
    assert reasoning == tokenizer.decode(ids[:e], skip_special_tokens=True)
    assert choice.text == tokenizer.decode(answer, skip_special_tokens=True)


def test_streaming_never_leaks_part_of_the_delimiter(smol: Any, tokenizer: Any) -> None:
    prompt = tokenizer.encode("Question: what is 4+4? Answer: ", add_special_tokens=False)
    prompt += tokenizer.encode("<think>", add_special_tokens=False)
    client = openai.OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused", max_retries=0)
    args: dict[str, Any] = {
        "model": smol.model,
        "prompt": prompt,
        "max_tokens": 200,
        "temperature": 0,
        "extra_headers": {"X-Budget-Thinking": str(T), "X-Budget-Solution": str(S)},
    }
    whole = client.completions.create(**args)
    text, reasoning = [], []
    for chunk in client.completions.create(**args, stream=True):
        for c in chunk.choices:
            text.append(c.text or "")
            reasoning.append((c.model_extra or {}).get("reasoning_content") or "")
    assert "".join(text) == whole.choices[0].text
    said = (whole.choices[0].model_extra or {}).get("reasoning_content") or ""
    assert "".join(reasoning) == said
    assert "</think>" not in "".join(text) and "think>" not in "".join(text)
