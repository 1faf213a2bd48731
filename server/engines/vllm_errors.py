"""How the in-process vLLM engines (``LocalEngine``, ``RewardEngine``) map vLLM's errors.

VLLMClientError (validation, our processors' validate_params) -> InvalidRequest (400)
EngineDeadError                                               -> BackendUnavailable (503)
TimeoutError                                                  -> BackendTimeout (504)
anything else                                                 -> unexpected (500)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from server.engines.errors import mapped, unexpected
from strategies.errors import BackendTimeout, BackendUnavailable, GatewayError, InvalidRequest


def convert(exc: Exception) -> GatewayError:
    """The ``GatewayError`` for an exception raised by vLLM's engine (see the module table)."""
    from vllm.exceptions import VLLMClientError
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(exc, EngineDeadError):
        return BackendUnavailable("the engine is dead; the server must be restarted")
    if isinstance(exc, VLLMClientError):
        param = getattr(exc, "parameter", None)
        message = str(exc) or type(exc).__name__
        return InvalidRequest(message, param=param if isinstance(param, str) else None)
    if isinstance(exc, TimeoutError):
        return BackendTimeout("the engine did not answer in time")
    return unexpected(exc)


@contextmanager
def map_vllm_errors() -> Iterator[None]:
    """Re-raise vLLM's exceptions from the block as gateway errors."""
    with mapped(convert):
        yield
