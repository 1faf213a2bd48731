"""How the in-process vLLM engines (``LocalEngine``, ``RewardEngine``) map vLLM's errors.

VLLMClientError (validation, our processors' validate_params) -> InvalidRequest (400)
EngineDeadError                                               -> BackendUnavailable (503)
TimeoutError                                                  -> BackendTimeout (504)
anything else                                                 -> unexpected (500)

Many of vLLM's checks name no parameter (``"stop cannot contain an empty string."``);
``param_for`` reads it from the message (``PARAMS``), so that the 400 names the field as
our own checks do. The remote engine reads vLLM servers' messages with it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from core.errors import BackendTimeout, BackendUnavailable, GatewayError, InvalidRequest
from engines.errors import mapped, unexpected

# vLLM 0.32's messages (vllm/sampling_params.py ``_verify_args``, ``_verify_greedy_sampling``,
# ``_verify_num_sequences``; vllm/v1/engine/input_processor.py ``_validate_prompt_len``)
# -> the request field. First match wins.
PARAMS: Final[tuple[tuple[re.Pattern[str], str], ...]] = tuple(
    (re.compile(pattern), param)
    for pattern, param in (
        (r"^stop cannot contain an empty string", "stop"),
        (r"^stop strings are only supported", "stop"),
        (r"^n must be ", "n"),  # "n must be 1 when using greedy sampling", "... at least 1"
        # Not "The decoder prompt (length N) is longer ...": the client's prompt is checked
        # before the engine, so that one is a strategy's own follow-up prompt.
        (r"^The decoder prompt cannot be empty", "prompt"),
        (r"^Token id -?\d+ is out of vocabulary", "prompt"),
        # A JSON Schema the grammar backend cannot compile (xgrammar's message).
        (r"^Failed to transform json schema", "response_format"),
        (
            r"^(temperature|top_p|top_k|min_p|max_tokens|min_tokens|seed|presence_penalty|"
            r"frequency_penalty|repetition_penalty|logprobs|stop_token_ids|bad_words) ",
            r"\1",
        ),
    )
)


def param_for(message: str) -> str | None:
    """The request field a vLLM validation message is about, if ``PARAMS`` knows it."""
    for pattern, param in PARAMS:
        found = pattern.match(message)
        if found:
            return found.expand(param)
    return None


def convert(exc: Exception) -> GatewayError:
    """The ``GatewayError`` for an exception raised by vLLM's engine (see the module table)."""
    from vllm.exceptions import VLLMClientError
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(exc, EngineDeadError):
        return BackendUnavailable("the engine is dead; the server must be restarted")
    if isinstance(exc, VLLMClientError):
        param = getattr(exc, "parameter", None)
        message = str(exc) or type(exc).__name__
        if not isinstance(param, str):
            param = param_for(message)
        return InvalidRequest(message, param=param)
    if isinstance(exc, TimeoutError):
        return BackendTimeout("the engine did not answer in time")
    return unexpected(exc)


@contextmanager
def map_vllm_errors() -> Iterator[None]:
    """Re-raise vLLM's exceptions from the block as gateway errors."""
    with mapped(convert):
        yield
