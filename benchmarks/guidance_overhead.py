"""Cost of budget guidance: decode throughput in ONE engine, and the op at realistic size.

Part 1 (engine, CPU, testbed ``base`` as the guidance wrapper): batches of ``--rows``
greedy requests on long questions (thinking outlasts ``--tokens``, so rows stay in the
thinking phase), ``ignore_eos``, fixed length. Rounds alternate three batch kinds in the
same engine, so the shared machine's drift hits all of them alike:

  unguided     no guidance arguments (the processor is loaded and idle)
  boundaries   every row guided (B = 100000) at line starts, as the method runs
  every-step   every row guided at EVERY thinking step (``thinkgate_bg_all_steps``):
               the worst case, predictor + op on the whole batch each step

Reported: median seconds per batch and throughput ratios guided/unguided.

Part 2 (op only, one process, no engine): ``gamma_reweight_ref`` (torch, CPU) and the
predictor head at rows x vocab = 256 x 151,936 (Qwen-size vocabulary), against a
memory-bandwidth floor (bytes the fused op must move / measured copy bandwidth). The
Triton kernel is timed only where a CUDA device exists.

    .venv/bin/python -m benchmarks.guidance_overhead [--rounds 6] [--rows 32]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks.out_paths import results_of

ROOT = Path(__file__).resolve().parents[1]
RESULTS = results_of("guidance_overhead")


def _engine_part(args: argparse.Namespace) -> dict[str, list[float]]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from kernels.guidance import args as guidance_args
    from kernels.guidance.plugin import hf_overrides
    from kernels.guidance.vllm_v1 import BudgetGuidanceLogitsProcessor
    from kernels.offline_engine import cpu_llm
    from testbed.task import make_questions
    from testbed.tokenizer import CharCodec, chat_prompt

    codec = CharCodec()
    questions = make_questions("test", args.rows, seed=5, min_ops=12, max_ops=12)
    prompts = [
        TokensPrompt(prompt_token_ids=codec.encode(chat_prompt(q.prompt))) for q in questions
    ]
    llm = cpu_llm(
        args.model,
        max_num_seqs=max(64, args.rows),
        hf_overrides=hf_overrides(),
        logits_processors=[BudgetGuidanceLogitsProcessor],
    )
    big = 100_000
    kinds: dict[str, dict[str, int]] = {
        "unguided": {},
        "boundaries": guidance_args.extra_args(big),
        "every-step": {**guidance_args.extra_args(big), guidance_args.ALL_STEPS: 1},
    }
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for rnd in range(args.rounds + 1):
        for kind, extra in kinds.items():
            params = SamplingParams(
                temperature=0.0,
                max_tokens=args.tokens,
                min_tokens=args.tokens,
                ignore_eos=True,
                extra_args=extra or None,
            )
            t0 = time.perf_counter()
            outs = llm.generate(prompts, params, use_tqdm=False)
            dt = time.perf_counter() - t0
            assert all(len(o.outputs[0].token_ids) == args.tokens for o in outs)
            if rnd > 0:  # round 0 warms up
                times[kind].append(dt)
        print({k: round(v[-1], 3) for k, v in times.items() if v}, flush=True)
    return times


def _op_part(rows: int, vocab: int, reps: int) -> dict[str, float]:
    from kernels.guidance.gamma import gamma_reweight_ref
    from kernels.guidance.predictor import BudgetPredictor, PredictorConfig

    torch.manual_seed(0)
    logits = torch.randn(rows, vocab)
    a = torch.randn(rows, vocab) + 30.0
    r = torch.randn(rows, vocab) + 20.0
    budget = torch.randint(1, 500, (rows,), dtype=torch.int32)
    mask = torch.ones(rows, dtype=torch.int32)

    cpu: dict[str, float] = {}

    def timed(fn: object, n: int, name: str = "") -> float:
        """Median wall seconds; ``cpu[name]``: median process CPU seconds (all threads),
        which the other jobs on a shared machine disturb less than wall time."""
        assert callable(fn)
        fn()
        walls, cpus = [], []
        for _ in range(n):
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        cpu[name] = statistics.median(cpus)
        return statistics.median(walls)

    op_s = timed(lambda: gamma_reweight_ref(logits.clone(), None, a, r, budget, mask), reps, "op")
    clone_s = timed(lambda: logits.clone(), reps, "clone")
    op_s = max(op_s - clone_s, 0.0)
    op_cpu = max(cpu["op"] - cpu["clone"], 0.0)
    config = PredictorConfig(
        hidden_size=3584,
        vocab_size=vocab,
        width=256,
        rank=64,
        think_end_id=0,
        boundary_token_ids=(1,),
    )
    predictor = BudgetPredictor(config).eval()
    h = torch.randn(rows, 3584)
    with torch.inference_mode():
        head_s = timed(lambda: predictor.raw(h), reps, "head")
    # Memory floor of the fused op: read logits, a, l; write logits (fp32).
    moved = 4 * 4 * rows * vocab
    big = torch.empty(64 * 1024 * 1024 // 4)
    copy_s = timed(lambda: big.clone(), reps)
    bandwidth = 2 * big.numel() * 4 / copy_s  # bytes read + written per second
    return {
        "op_ms": op_s * 1e3,
        "op_cpu_ms": op_cpu * 1e3,
        "head_ms": head_s * 1e3,
        "head_cpu_ms": cpu["head"] * 1e3,
        "bytes_mb": moved / 1e6,
        "bandwidth_gbs": bandwidth / 1e9,
        "floor_ms": moved / bandwidth * 1e3,
        "predictor_params_m": sum(p.numel() for p in predictor.parameters()) / 1e6,
    }


def _triton_part(rows: int, vocab: int) -> str:
    if not torch.cuda.is_available():
        return (
            "Triton: no GPU in this run; the kernel was not timed (checked for correctness "
            "only, against the torch op under TRITON_INTERPRET=1)"
        )
    from kernels.guidance.gamma_triton import gamma_reweight_triton

    dev = torch.device("cuda")
    logits = torch.randn(rows, vocab, device=dev)
    a = torch.randn(rows, vocab, device=dev) + 30.0
    r = torch.randn(rows, vocab, device=dev) + 20.0
    budget = torch.randint(1, 500, (rows,), dtype=torch.int32, device=dev)
    mask = torch.ones(rows, dtype=torch.int32, device=dev)
    for _ in range(3):
        gamma_reweight_triton(logits, None, a, r, budget, mask)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        gamma_reweight_triton(logits, None, a, r, budget, mask)
    torch.cuda.synchronize()
    return f"Triton: {(time.perf_counter() - t0) / 20 * 1e3:.3f} ms per call"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", type=Path, default=ROOT / "testbed" / "models" / "base")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--op-rows", type=int, default=256)
    p.add_argument("--op-vocab", type=int, default=151_936)
    p.add_argument("--op-reps", type=int, default=3)
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)

    lines = ["# Budget guidance overhead", ""]
    if not args.skip_engine:
        times = _engine_part(args)
        med = {k: statistics.median(v) for k, v in times.items()}
        base = med["unguided"]
        lines += [
            f"Engine: testbed `base` (guidance wrapper), {args.rows} rows x {args.tokens} "
            f"tokens, greedy, ignore_eos; {args.rounds} rounds alternating the kinds in one "
            "engine; medians.",
            "",
            "| batch kind | median s / batch | tokens/s | throughput vs unguided |",
            "|---|---|---|---|",
        ]
        for kind, m in med.items():
            tps = args.rows * args.tokens / m
            lines.append(f"| {kind} | {m:.3f} | {tps:.0f} | {base / m:.3f} |")
        lines += [
            "",
            "Per-round seconds: " + str({k: [round(x, 3) for x in v] for k, v in times.items()}),
            "",
        ]
    op = _op_part(args.op_rows, args.op_vocab, args.op_reps)
    lines += [
        f"Op at {args.op_rows} rows x {args.op_vocab} vocab (CPU, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads):",
        "",
        "| what | wall ms per call | CPU ms (all threads) |",
        "|---|---|---|",
        "| `gamma_reweight_ref` (torch: softplus, gammainc, mask, fallback, log, add) "
        f"| {op['op_ms']:.1f} | {op['op_cpu_ms']:.1f} |",
        f"| memory floor of the fused op ({op['bytes_mb']:.0f} MB at "
        f"{op['bandwidth_gbs']:.1f} GB/s measured copy bandwidth) | {op['floor_ms']:.1f} | |",
        "| predictor on 256 hidden states of size 3584 (width 256, rank 64; "
        f"{op['predictor_params_m']:.1f} M params) | {op['head_ms']:.1f} "
        f"| {op['head_cpu_ms']:.1f} |",
        "",
        _triton_part(args.op_rows, args.op_vocab) + ".",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with other jobs. Command: "
        "`.venv/bin/python -m benchmarks.guidance_overhead"
        + (" --skip-engine" if args.skip_engine else f" --rounds {args.rounds} --rows {args.rows}")
        + "`.",
    ]
    md = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "guidance-overhead.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
