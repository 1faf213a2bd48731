"""The timed cases: each kernel (and its torch reference) on realistic decode batches."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from kernels.gpu_check.checks import LARGE_VOCAB, elastic_table
from kernels.gpu_check.timing import Timing, measured_copy_peak, median_us, table_peak


def peak_bandwidth(device: torch.device, name: str) -> tuple[float, str]:
    peak = table_peak(name)
    if peak is not None:
        return peak, f"{peak / 1e12:.2f} TB/s datasheet for {name}"
    if device.type != "cuda":
        return 50e9, "nominal 50 GB/s (CPU interpreter: not meaningful)"
    measured = measured_copy_peak(device)
    return measured, f"{measured / 1e12:.2f} TB/s measured device-to-device copy"


Case = tuple[str, Callable[[float], Timing]]


def cases(device: torch.device, quick: bool) -> list[Case]:
    vocab = 4099 if quick else LARGE_VOCAB
    reps = 3 if quick else 50
    out: list[Case] = []
    for rows in (1, 8) if quick else (1, 64, 256):
        out.append((f"elastic mask {rows}x{vocab} all forced", _mask(device, rows, vocab, reps)))
    out.append(
        (f"elastic track {8 if quick else 256} rows", _track(device, 8 if quick else 256, reps))
    )
    for rows in (1, 2) if quick else (1, 16, 64):
        out.append((f"gamma reweight {rows}x{vocab}", _gamma(device, rows, vocab, reps)))
    return out


def _mask(device: torch.device, rows: int, vocab: int, reps: int) -> Callable[[float], Timing]:
    from kernels.elastic.mask import elastic_mask_ref
    from kernels.elastic.mask_triton import apply_elastic_mask_triton
    from kernels.elastic.state import ElasticCol

    def run(peak: float) -> Timing:
        table = elastic_table(random.Random(0), rows, vocab, device, forced=1.0)
        table[ElasticCol.ACTIVE] = 1
        table[ElasticCol.PHASE] = 0
        table[ElasticCol.THINK_BUDGET] = 0  # every row forced: one full write per row
        table[ElasticCol.THINK_END_ID] = 5
        logits = torch.randn(rows, vocab, device=device)
        tri = median_us(lambda: apply_elastic_mask_triton(logits, table), device, reps=reps)
        ref = median_us(lambda: elastic_mask_ref(logits, table), device, reps=reps)
        return Timing("elastic mask", f"{rows}x{vocab}", tri, ref, rows * vocab * 4, peak)

    return run


def _track(device: torch.device, rows: int, reps: int) -> Callable[[float], Timing]:
    from kernels.elastic.state import ElasticCol
    from kernels.elastic.track import elastic_track_ref
    from kernels.elastic.track_triton import apply_elastic_track_triton

    def run(peak: float) -> Timing:
        max_len = 8192
        table = elastic_table(random.Random(1), rows, 8, device)
        table[ElasticCol.ACTIVE] = 1
        table[ElasticCol.THINKING_OPEN] = 1
        table[ElasticCol.THINK_END_POS] = -1
        table[ElasticCol.THINK_END_ID] = 9  # never present: every row keeps scanning
        prompt = torch.full((rows,), 100, dtype=torch.int32, device=device)
        total = torch.full((rows,), max_len - 1, dtype=torch.int32, device=device)
        tokens = torch.zeros((rows, max_len), dtype=torch.int32, device=device)
        mapping = torch.arange(rows, dtype=torch.int32, device=device)

        def step() -> None:  # one decode step: one new committed token per row
            table[ElasticCol.SCAN_POS] = max_len - 2
            apply_elastic_track_triton(table, mapping, tokens, prompt, total)

        tri = median_us(step, device, reps=reps)
        ref = median_us(
            lambda: elastic_track_ref(table, mapping, tokens, prompt, total), device, reps=reps
        )
        # The kernel's floor: per row ~11 int32 reads, 4 writes and one new token.
        return Timing("elastic track", f"{rows} rows (1 new token)", tri, ref, rows * 16 * 4, peak)

    return run


def _gamma(device: torch.device, rows: int, vocab: int, reps: int) -> Callable[[float], Timing]:
    from kernels.guidance.gamma import gamma_reweight_ref
    from kernels.guidance.gamma_triton import gamma_reweight_triton

    def run(peak: float) -> Timing:
        gen = torch.Generator().manual_seed(0)
        a_raw = (torch.rand(rows, vocab, generator=gen) * 40 + 10).to(device)
        l_raw = (torch.rand(rows, vocab, generator=gen) * 20 + 10).to(device)
        budget = torch.full((rows,), 500, dtype=torch.int32, device=device)
        mask = torch.ones(rows, dtype=torch.int32, device=device)
        base = torch.randn(rows, vocab, device=device)
        logits = base.clone()

        def tri_step() -> None:
            logits.copy_(base)
            gamma_reweight_triton(logits, None, a_raw, l_raw, budget, mask)

        def ref_step() -> None:
            logits.copy_(base)
            gamma_reweight_ref(logits, None, a_raw, l_raw, budget, mask)

        copy = median_us(lambda: logits.copy_(base), device, reps=reps)
        tri = max(median_us(tri_step, device, reps=reps) - copy, 0.0)
        ref = max(median_us(ref_step, device, reps=reps) - copy, 0.0)
        # Three reads (logits, alpha, rate) and one write per token.
        return Timing("gamma reweight", f"{rows}x{vocab}", tri, ref, rows * vocab * 16, peak)

    return run
