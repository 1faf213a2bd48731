"""Microbenchmark of the Elastic Reasoning mask op: batched torch op vs a per-row loop.

256 rows x vocab 151,936 fp32 (a Qwen2/R1-distill vocab). Scenarios: no row forced
(every row active, budgets not yet spent: the common step), 8 rows forced, all rows
forced (worst case). The per-row loop is how SGLang's thinking-budget processor works:
Python over every request each step, one torch call per forced row. The floor is the
bytes the op must write (forced rows only) over this machine's measured memcpy
bandwidth. Triton needs a GPU: none in this run.

    .venv/bin/python benchmarks/kernels_elastic.py [--threads 1] [--repeat 20]

Writes benchmarks/results/kernels_elastic/kernels-elastic.md and prints it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from benchmarks.out_paths import results_of
from kernels.elastic.args import ElasticArgs
from kernels.elastic.mask import elastic_mask_ref
from kernels.elastic.state import THINKING, ElasticCol, new_state, row_values

ROWS = 256
VOCAB = 151_936
END, EOS = 151_649, 151_643
OUT = results_of("kernels_elastic") / "kernels-elastic.md"


@dataclass(frozen=True)
class _Result:
    scenario: str
    forced_rows: int
    batched_ms: float
    loop_ms: float
    floor_ms: float


def _timed(fn: Callable[[], object], repeat: int) -> float:
    """Median CPU milliseconds of ``fn`` on this thread, over ``repeat`` runs after a
    warm-up. CPU time, not wall time: the 2 cores are shared with other programs, and
    with one torch thread every op runs on the calling thread, so thread time is the
    op's own cost while wall time would mostly measure waiting for a core."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.thread_time()
        fn()
        samples.append((time.thread_time() - start) * 1e3)
    return statistics.median(samples)


def _memcpy_gb_s(repeat: int) -> float:
    """Bytes moved (read + write) per second by a large tensor copy on this machine."""
    src = torch.randn(ROWS, VOCAB)
    dst = torch.empty_like(src)
    ms = _timed(lambda: dst.copy_(src), repeat)
    return 2 * src.numel() * 4 / (ms / 1e3) / 1e9


def scenario(forced_rows: int, repeat: int, bandwidth: float) -> _Result:
    state = new_state(ROWS, torch.device("cpu"))
    args = ElasticArgs(thinking_budget=100, solution_budget=50, think_end_id=END, eos_id=EOS)
    for row in range(ROWS):
        state.write(row, row_values(args))
    # The first `forced_rows` rows have spent their thinking budget.
    state.set_column(ElasticCol.PHASE, list(range(ROWS)), [THINKING] * ROWS)
    state.set_column(
        ElasticCol.USED, list(range(ROWS)), [100 if r < forced_rows else 10 for r in range(ROWS)]
    )
    state.flush()
    logits = torch.randn(ROWS, VOCAB)

    # SGLang-style: host-side per-request state, Python over every row each step.
    host = [(1, THINKING, 100 if r < forced_rows else 10, 100, 50, END, EOS) for r in range(ROWS)]

    def loop() -> None:
        for row, (active, phase, used, t, s, end, eos) in enumerate(host):
            if not active:
                continue
            if phase == THINKING and used >= t:
                forced = end
            elif phase != THINKING and 0 <= s <= used:
                forced = eos
            else:
                continue
            logits[row].fill_(float("-inf"))
            logits[row, forced] = 0.0

    batched_ms = _timed(lambda: elastic_mask_ref(logits, state.device), repeat)
    loop_ms = _timed(loop, repeat)
    floor_ms = forced_rows * VOCAB * 4 / (bandwidth * 1e9) * 1e3
    name = {0: "none forced", ROWS: "all forced"}.get(forced_rows, f"{forced_rows} forced")
    return _Result(name, forced_rows, batched_ms, loop_ms, floor_ms)


def _adapter_step_ms(repeat: int) -> tuple[float, float]:
    """V1 adapter, 256 active rows each one token longer per step, nothing forced:
    CPU ms of update_state (host bookkeeping) and of apply (the batched op)."""
    from types import SimpleNamespace

    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from kernels.elastic import args as keys
    from kernels.elastic.vllm_v1 import ElasticLogitsProcessor

    config = SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_seqs=ROWS),
        model_config=SimpleNamespace(get_vocab_size=lambda: VOCAB),
    )
    proc = ElasticLogitsProcessor(config, torch.device("cpu"), False)  # type: ignore[arg-type]
    params = SamplingParams(
        extra_args={keys.THINKING_BUDGET: 10**6, keys.THINK_END_ID: END, keys.EOS_ID: EOS}
    )
    outs: list[list[int]] = [[] for _ in range(ROWS)]
    proc.update_state(BatchUpdate(ROWS, [], [(r, params, [], outs[r]) for r in range(ROWS)], []))
    logits = torch.randn(ROWS, VOCAB)

    def update() -> None:
        for out in outs:
            out.append(7)
        proc.update_state(None)

    update_ms = _timed(update, repeat)
    apply_ms = _timed(lambda: proc.apply(logits), repeat)
    return update_ms, apply_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=20)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    bandwidth = _memcpy_gb_s(opts.repeat)
    results = [scenario(n, opts.repeat, bandwidth) for n in (0, 8, ROWS)]
    lines = [
        "# Elastic mask op: batched torch op vs per-row Python loop",
        "",
        f"Machine: {platform.machine()} {platform.processor() or ''}, "
        f"{os.cpu_count()} CPUs (shared), torch {torch.__version__}, "
        f"{opts.threads} thread(s); no GPU in this run.",
        f"Command: `.venv/bin/python benchmarks/kernels_elastic.py --threads {opts.threads} "
        f"--repeat {opts.repeat}`: median thread CPU time of {opts.repeat} calls after a "
        "warm-up (the cores are shared, so wall time would measure the wait for a core).",
        f"Shape: {ROWS} rows x vocab {VOCAB:,} fp32. Measured memcpy bandwidth "
        f"(read + write, same CPU-time basis): {bandwidth:.1f} GB/s. Floor = bytes the op "
        "must write (forced rows x vocab x 4) / that bandwidth. The batched op on CPU "
        "writes the forced rows only (the branch-free full pass is for non-CUDA "
        "accelerators; CUDA gets the Triton kernel, which also writes forced rows only).",
        "",
        "| scenario | forced rows | batched torch op (ms) | per-row loop (ms) "
        "| loop / batched (< 1: loop faster) | floor (ms) | Triton on GPU |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.scenario} | {r.forced_rows} | {r.batched_ms:.3f} | {r.loop_ms:.3f} "
            f"| {r.loop_ms / r.batched_ms:.2f}x | {r.floor_ms:.3f} | no GPU in this run |"
        )
    update_ms, apply_ms = _adapter_step_ms(opts.repeat)
    lines += [
        "",
        f"V1 adapter per step, {ROWS} active rows, nothing forced (CPU ms): "
        f"update_state {update_ms:.3f} (host bookkeeping over the live output lists, "
        f"incl. appending one token to each list), apply {apply_ms:.3f}.",
    ]
    text = "\n".join(lines) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
