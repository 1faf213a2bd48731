"""Budget guidance: per-request args, slot state, the Gamma reweighting op (torch +
Triton), the budget predictor, the wrapper model and its vLLM plugin, and the two
vLLM adapters (``vllm_v1`` for the CPU runner, ``vllm_v2`` for Model Runner V2)."""
