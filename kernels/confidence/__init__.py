"""DeepConf's online early stop: per-request args, slot state, the batched op, and the
two vLLM adapters (``vllm_v1`` for the CPU runner, ``vllm_v2`` for Model Runner V2)."""
