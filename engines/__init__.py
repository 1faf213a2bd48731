"""How the gateway talks to vLLM: the ``Engine`` protocol and its implementations.

``LocalEngine`` (vLLM's ``AsyncLLM`` in process) and ``RemoteEngine`` (vLLM's own
OpenAI servers over HTTP) are imported lazily: a gateway fronting remote servers never
imports torch or vLLM. ``open_engine`` (``engines.factory``) picks one by settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.engine import (
    Engine,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    SamplingConfig,
)

if TYPE_CHECKING:
    from engines.local.engine import LocalEngine
    from engines.remote.engine import RemoteEngine

__all__ = [
    "Engine",
    "GenerateRequest",
    "LocalEngine",
    "ModelTokens",
    "Sample",
    "SampleDelta",
    "SamplingConfig",
    "RemoteEngine",
]


def __getattr__(name: str) -> object:
    if name == "LocalEngine":
        from engines.local.engine import LocalEngine

        return LocalEngine
    if name == "RemoteEngine":
        from engines.remote.engine import RemoteEngine

        return RemoteEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
