"""Batched logits ops and vLLM logits-processor adapters."""
