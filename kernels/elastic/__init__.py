"""Elastic Reasoning ops: row-state columns, the mask op (torch + Triton), V2 tracking."""

from kernels.elastic.mask import apply_elastic_mask, elastic_forced_tokens, elastic_mask_ref
from kernels.elastic.state import ANSWER, THINKING, UNLIMITED, ElasticCol, new_state, row_values

__all__ = [
    "ANSWER",
    "THINKING",
    "UNLIMITED",
    "ElasticCol",
    "apply_elastic_mask",
    "elastic_forced_tokens",
    "elastic_mask_ref",
    "new_state",
    "row_values",
]
