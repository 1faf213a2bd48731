"""A tiny helper for calling thinkgate with the OpenAI SDK (copy it; no dependencies).

from openai import OpenAI
from thinkgate_client import budget_headers, thinkgate_info

client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
reply = client.chat.completions.create(
    model="testbed-base",
    messages=[{"role": "user", "content": "Compute 3+8-5+7 mod 10."}],
    extra_headers=budget_headers(strategy="elastic", thinking=64, solution=16),
)
print(thinkgate_info(reply))
"""

from __future__ import annotations

from typing import Any

__all__ = ["budget_headers", "reasoning_of", "thinkgate_info"]


def budget_headers(
    *,
    strategy: str | None = None,
    thinking: int | None = None,
    solution: int | None = None,
    samples: int | None = None,
    k: int | None = None,
) -> dict[str, str]:
    """The ``X-Strategy`` / ``X-Budget-*`` headers for ``extra_headers=``.

    Unset arguments are left out (the server then applies body fields, then
    ``reasoning_effort``, then its defaults). Values are checked here too, so a typo
    fails before the request is sent; the server checks them again.
    """
    headers: dict[str, str] = {}
    if strategy is not None:
        headers["X-Strategy"] = strategy
    for name, value, low in (
        ("Thinking", thinking, 0),
        ("Solution", solution, 0),
        ("Samples", samples, 1),
        ("K", k, 1),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name.lower()} must be an integer >= {low}, got {value!r}")
        headers[f"X-Budget-{name}"] = str(value)
    return headers


def thinkgate_info(obj: Any) -> dict[str, Any]:
    """The ``thinkgate`` extension object of a response or of a stream's final chunk
    (strategy, samples drawn, budget applied, strategy details); {} when absent."""
    extra = getattr(obj, "model_extra", None) or {}
    info = extra.get("thinkgate")
    return dict(info) if isinstance(info, dict) else {}


def reasoning_of(message_or_delta: Any) -> str:
    """The thinking text of a chat message or stream delta ('' when there is none)."""
    extra = getattr(message_or_delta, "model_extra", None) or {}
    text = extra.get("reasoning_content") or extra.get("reasoning")
    return text if isinstance(text, str) else ""
