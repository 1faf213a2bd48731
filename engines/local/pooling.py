"""One sequence through an in-process vLLM pooling engine: what the reward engine and
the PRM engine share (each reads its own numbers from the output)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from core.errors import BackendError
from engines.vllm_errors import map_vllm_errors

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM


async def encode_one(
    llm: AsyncLLM, request_id: str, sequence: Sequence[int], params: Any, what: str
) -> Any:
    """The finished pooling output of ``sequence``; a cancelled call aborts its request
    (frees the engine's slot); ``what`` names the engine in errors."""
    from vllm.inputs import TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=list(sequence))
    last: Any = None
    finished = False
    try:
        with map_vllm_errors():
            async for out in llm.encode(prompt, params, request_id):
                last, finished = out, out.finished
    finally:
        if not finished:
            await asyncio.shield(llm.abort(request_id))
    if last is None:
        raise BackendError(f"the {what} returned nothing")
    return last
