"""The one place where foreign (vLLM) errors become thinkgate errors.

    VLLMValidationError / VLLMClientError / ValueError / TypeError -> InvalidRequest (400)
    EngineDeadError                                                -> BackendUnavailable (503)
    TimeoutError                                                   -> BackendTimeout (504)
    anything else                                                  -> BackendError (500)

``GatewayError`` and cancellation pass through untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from strategies.errors import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    GatewayError,
    InvalidRequest,
)


def _vllm_classes() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(client error classes, dead-engine classes); empty when vLLM is not installed."""
    try:
        from vllm.exceptions import VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError
    except ImportError:  # a gateway fronting remote engines only
        return (), ()
    return (VLLMClientError,), (EngineDeadError,)


@contextmanager
def map_engine_errors() -> Iterator[None]:
    """Re-raise any non-gateway exception from the block as the right ``GatewayError``."""
    try:
        yield
    except GatewayError:
        raise
    except Exception as exc:
        raise convert(exc) from exc


def convert(exc: Exception) -> GatewayError:
    """The ``GatewayError`` for a foreign exception (see the module table)."""
    client, dead = _vllm_classes()
    if dead and isinstance(exc, dead):
        return BackendUnavailable("the engine is dead; the server must be restarted")
    if (client and isinstance(exc, client)) or isinstance(exc, ValueError | TypeError):
        param = getattr(exc, "parameter", None)
        message = str(exc) or type(exc).__name__
        return InvalidRequest(message, param=param if isinstance(param, str) else None)
    if isinstance(exc, TimeoutError):
        return BackendTimeout("the engine did not answer in time")
    return BackendError(f"engine error: {type(exc).__name__}: {exc}")
