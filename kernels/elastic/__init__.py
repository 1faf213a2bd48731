"""Elastic Reasoning: per-request args, row-state columns, the mask op (torch +
Triton), V2 tracking, and the two vLLM adapters (``vllm_v1`` for the CPU runner,
``vllm_v2`` for Model Runner V2). Import light: nothing here pulls in torch."""
