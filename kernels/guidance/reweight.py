"""Budget guidance's reweighting, dispatched: the Triton kernel
(:mod:`kernels.guidance.gamma_triton`) for CUDA tensors, the torch reference
(:mod:`kernels.guidance.gamma`, which states the spec) otherwise. The adapters call
this; the two implementations do not import each other's code (the kernel reads the
spec's constants from the reference module)."""

from __future__ import annotations

import torch

from kernels.guidance.gamma import gamma_reweight_ref


def apply_gamma_reweight(
    logits: torch.Tensor,
    rows: torch.Tensor | None,
    a_raw: torch.Tensor,
    l_raw: torch.Tensor,
    budget: torch.Tensor,
    mask: torch.Tensor,
) -> torch.Tensor:
    """In place: the Triton kernel for CUDA tensors, :func:`gamma_reweight_ref` otherwise
    (the kernel is imported only then: Triton may be absent on a CPU host)."""
    if logits.is_cuda:
        from kernels.guidance.gamma_triton import gamma_reweight_triton

        return gamma_reweight_triton(logits, rows, a_raw, l_raw, budget, mask)
    return gamma_reweight_ref(logits, rows, a_raw, l_raw, budget, mask)
