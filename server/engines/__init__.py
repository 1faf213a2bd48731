"""How the gateway talks to vLLM: the ``Engine`` protocol and its implementations.

``LocalEngine`` (vLLM's ``AsyncLLM`` in process) is imported lazily so that the HTTP
layer does not pull in torch and vLLM unless it starts a local engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.engines.errors import map_engine_errors
from strategies.engine import (
    Engine,
    GenerateRequest,
    ModelTokens,
    Sample,
    SampleDelta,
    SamplingConfig,
)

if TYPE_CHECKING:
    from server.engines.local import LocalEngine

__all__ = [
    "Engine",
    "GenerateRequest",
    "LocalEngine",
    "ModelTokens",
    "Sample",
    "SampleDelta",
    "SamplingConfig",
    "map_engine_errors",
]


def __getattr__(name: str) -> object:
    if name == "LocalEngine":
        from server.engines.local import LocalEngine

        return LocalEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
