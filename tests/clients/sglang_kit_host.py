"""The host of SGLang's Anthropic Messages test mixin, ``AnthropicMessagesMixin`` in
``sglang/test/kits/anthropic_messages_kit.py`` of the ``sglang`` wheel, run unmodified in
its own virtual environment (tests/clients/test_sglang_anthropic_kit.py builds it and runs
this file there with pytest; thinkgate's suite never imports it).

SGLang hosts the mixin in a ``unittest.TestCase`` that provides ``base_url``, ``api_key``
and ``model``; so does this file, from ``SGLANG_KIT_BASE_URL``, ``SGLANG_KIT_API_KEY``
and ``SGLANG_KIT_MODEL``.

Why the kit's file is loaded by path and two of SGLang's modules are stood in for: the
kit imports ``AnthropicMessagesRequest`` and ``AnthropicServing`` (SGLang's own server
classes) for one test of SGLang's own request converter, and importing anything under
``sglang`` runs ``sglang/__init__.py``, which needs torch, triton, transformers and
SGLang's CUDA kernels (gigabytes; not installable on a CPU host). Every other test of the
kit calls only the server under test, over HTTP or with the ``anthropic`` SDK. The stand-ins
raise when that one test uses them, so it fails, and it is listed as SGLang's own code.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
import unittest
from pathlib import Path

KIT = "sglang/test/kits/anthropic_messages_kit.py"
SERVER_CLASSES = {
    "sglang.srt.entrypoints.anthropic.protocol": "AnthropicMessagesRequest",
    "sglang.srt.entrypoints.anthropic.serving": "AnthropicServing",
}


def kit_path() -> Path:
    """The kit's file in the installed wheel, found without importing ``sglang``."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed"
    return Path(list(spec.submodule_search_locations)[0]).parent / KIT


def _stand_in(module: str, name: str) -> types.ModuleType:
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError(
            f"{module}.{name} is SGLang's own server code, not importable here (it needs "
            "torch and SGLang's kernels, left out): this test checks SGLang, not the server"
        )

    stand_in = types.ModuleType(module)
    setattr(stand_in, name, type(name, (), {"__init__": refuse}))
    return stand_in


def _load_kit() -> types.ModuleType:
    for module, name in SERVER_CLASSES.items():
        sys.modules.setdefault(module, _stand_in(module, name))
    spec = importlib.util.spec_from_file_location("anthropic_messages_kit", kit_path())
    assert spec is not None and spec.loader is not None
    kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kit)
    return kit


Mixin = _load_kit().AnthropicMessagesMixin


class TestThinkgateAnthropicMessages(unittest.TestCase, Mixin):  # type: ignore[misc,valid-type]
    base_url = os.environ.get("SGLANG_KIT_BASE_URL", "http://127.0.0.1:8000")
    api_key = os.environ.get("SGLANG_KIT_API_KEY", "unused")
    model = os.environ.get("SGLANG_KIT_MODEL", "default")
