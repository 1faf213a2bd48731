"""The context a local engine serves: the one asked for, else the model's own, as vLLM
derives it from the model's config (its ``max_position_embeddings``, a RoPE scaling
factor, ...), and the tokens one engine step may hold."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from vllm.engine.arg_utils import AsyncEngineArgs

# The step's token budget by default: every prefill of a full batch of short prompts in
# one step (64 x 512), never less than one whole prompt (prefills are not chunked).
STEP_TOKENS: Final = 32768


def served_context(args: AsyncEngineArgs) -> int:
    """``args.max_model_len``, or (None) the length vLLM derives from the model."""
    if args.max_model_len is not None:
        return int(args.max_model_len)
    return int(args.create_model_config().max_model_len)


def batched_tokens(asked: int | None, context: int, max_num_seqs: int) -> int:
    """The tokens one step may hold: ``asked``, else a full batch of prompts up to
    ``STEP_TOKENS``; never under ``context``, so no prefill is split (a seeded request
    with a chunked prefill crashes vLLM's CPU engine)."""
    if asked is not None:
        return max(asked, context)
    return max(context, min(max_num_seqs * context, STEP_TOKENS))
