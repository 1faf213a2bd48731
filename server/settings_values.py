"""How ``Settings`` reads its values: list settings from JSON or commas, remote headers
(``Name: value``), vLLM server URLs, and the think strings a reasoning format presets.
"""

from __future__ import annotations

import json
from typing import Annotated
from urllib.parse import urlsplit

from pydantic_settings import NoDecode

from core.reasoning_formats import DEFAULT_FORMAT, REASONING_FORMATS

# Split by ``split_list``, not decoded as JSON by pydantic-settings (commas are allowed).
StrList = Annotated[tuple[str, ...], NoDecode]


def split_list(value: object) -> object:
    """A list setting given as text: a JSON list (``'["a:B"]'``), else its
    comma-separated parts (``a:B,c:D``)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return tuple(json.loads(text))
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return value


def header_pair(item: str) -> tuple[str, str]:
    """``Name: value`` as a header pair; a ValueError naming the form otherwise."""
    name, sep, value = item.partition(":")
    if not sep or not name.strip() or not value.strip() or any(c in name for c in " \t\r\n"):
        raise ValueError("a remote header is 'Name: value' (e.g. 'Authorization: Bearer t')")
    return name.strip(), value.strip()


def checked_urls(value: tuple[str, ...]) -> tuple[str, ...]:
    """vLLM servers' base URLs, each an http(s) URL with a host, without a trailing
    slash; a ValueError naming the first that is not."""
    for url in value:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"vllm_urls: {url!r} is not an http(s)://host:port URL")
    return tuple(url.rstrip("/") for url in value)


def with_format_strings(data: object) -> object:
    """Think strings not given explicitly come from the ``reasoning_format`` preset
    (before validation: afterwards an explicit ``<think>`` looks like the default)."""
    if not isinstance(data, dict):
        return data
    name = data.get("reasoning_format", DEFAULT_FORMAT)
    if not isinstance(name, str) or name not in REASONING_FORMATS:
        return data  # the field validator reports it
    preset = REASONING_FORMATS[name]
    filled = dict(data)
    if filled.get("think_start") is None:
        filled["think_start"] = preset.think_start
    if filled.get("think_end") is None:
        filled["think_end"] = preset.think_end
    return filled
