"""Supervised training of the causal testbed models (`base`, `elastic`) on CPU."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from tqdm import tqdm
from transformers import Qwen2ForCausalLM

from testbed.data import Example, Variant, example_stream
from testbed.model import export, new_causal_lm
from testbed.tokenizer import CharCodec

# Default step cap, high enough that the wall-clock cap binds.
UNCAPPED_STEPS = 100_000

Precision = Literal["auto", "bf16", "fp32"]


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX).

    There, bf16 autocast trains the testbed model 1.6x faster than fp32 (2 cores, AMD EPYC
    with AVX512-BF16); elsewhere bf16 is emulated and slower, so `auto` keeps fp32.
    """
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def resolve_precision(precision: Precision) -> Literal["bf16", "fp32"]:
    if precision == "auto":
        return "bf16" if native_bf16() else "fp32"
    return precision


@dataclass(frozen=True, slots=True)
class TrainSettings:
    variant: Variant
    seed: int = 0
    minutes: float = 20.0  # wall-clock cap; the schedule follows whichever cap is nearer
    max_steps: int = UNCAPPED_STEPS
    batch_size: int = 48
    lr: float = 2e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    threads: int = 2
    init_from: str | None = None  # a model directory to fine-tune instead of a fresh init
    merge_weight: float = 1.0  # loss weight of merged lines' result digits (see data.py)
    step_weight: float = 1.0  # the same for step lines
    thorough_share: float = 0.0  # share of fully checked `base` traces (see traces.py)
    small_share: float = 0.0  # share of right operands drawn from 0-2 (see task.random_expr)
    cut_share: float = 0.0  # share of cut `base` traces, closed by a forced `</think>` (data.py)
    constant_lr: bool = False  # hold the peak rate after warm-up instead of a cosine decay
    # Matmuls in bf16 under autocast (weights, optimizer and loss stay fp32); see native_bf16.
    precision: Precision = "auto"
    # torch.compile of the forward pass: 1.2x more on top of bf16 (fused norms and RoPE),
    # for ~30 s of compilation per phase; a failed compile falls back to eager.
    compile: bool = True
    # Stop once the model gives the right result digit of step lines this probability
    # (EMA over batches): the arithmetic phase ends when the arithmetic is learned, however
    # long the seed's plateau lasts.
    until_step_prob: float | None = None


@dataclass(frozen=True, slots=True)
class TrainResult:
    steps: int
    tokens: int
    wall_s: float
    final_loss: float
    merged_result_prob: float | None = None  # EMA over training batches, see below
    step_result_prob: float | None = None  # the same for step lines
    operand_prob: float | None = None  # the same for the operands lines copy (data.py)
    first_step_s: float | None = None  # of wall_s: the first step, which compiles the model
    learned: bool | None = None  # whether `until_step_prob` was reached (None: no such rule)
    precision: str = "fp32"  # what `precision` resolved to on this machine


def batches(stream: Iterator[Example], batch_size: int, *, seed: int) -> Iterator[list[Example]]:
    """Batches of similar lengths (less padding): sort a pool, cut it, shuffle the cuts."""
    rng = random.Random(seed)
    while True:
        pool = sorted((next(stream) for _ in range(batch_size * 16)), key=lambda e: len(e.ids))
        chunks = [pool[i : i + batch_size] for i in range(0, len(pool), batch_size)]
        rng.shuffle(chunks)
        yield from chunks


def collate(
    examples: list[Example], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(e.ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    weights = torch.zeros((len(examples), width), dtype=torch.float32)
    for row, e in enumerate(examples):
        n = len(e.ids)
        ids[row, :n] = torch.tensor(e.ids)
        mask[row, :n] = 1
        weights[row, :n] = torch.tensor(e.weights)
    return ids, mask, weights


def weighted_lm_loss(
    logits: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    # Position t predicts token t+1; the weight belongs to the predicted token.
    pred = logits[:, :-1].reshape(-1, logits.shape[-1])
    target = ids[:, 1:].reshape(-1)
    w = weights[:, 1:].reshape(-1)
    per_token = torch.nn.functional.cross_entropy(pred, target, reduction="none")
    return (per_token * w).sum() / w.sum().clamp(min=1.0)


def lr_factor(progress: float, step: int, warmup_steps: int, *, constant: bool = False) -> float:
    """Linear warm-up, then cosine decay to 10% as `progress` goes from 0 to 1 (or none)."""
    warm = min(1.0, (step + 1) / max(1, warmup_steps))
    if constant:
        return warm
    return warm * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))))


def train_causal(settings: TrainSettings, out: Path, *, progress_bar: bool = True) -> TrainResult:
    """Train one causal variant and export it to `out` (a Hugging Face model directory)."""
    torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    codec = CharCodec()
    model: Qwen2ForCausalLM
    if settings.init_from is not None:
        model = Qwen2ForCausalLM.from_pretrained(settings.init_from, dtype=torch.float32)
    else:
        model = new_causal_lm(codec, seed=settings.seed)
    model.train()
    precision = resolve_precision(settings.precision)
    forward = _compiled(model) if settings.compile else model
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
    optim = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": settings.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=settings.lr,
        betas=(0.9, 0.98),
    )
    stream = example_stream(
        codec,
        settings.variant,
        seed=settings.seed,
        merge_weight=settings.merge_weight,
        step_weight=settings.step_weight,
        thorough_share=settings.thorough_share,
        small_share=settings.small_share,
        cut_share=settings.cut_share,
    )
    budget_s = settings.minutes * 60.0
    start = time.monotonic()
    # The cap counts from the end of the first step: that step compiles the model (79 s on
    # 2 cores with a cold inductor cache, a few with a warm one), and a cap meant to bound
    # a slow machine's training must not cut a fresh machine's phase short. wall_s counts
    # everything.
    first_step_s: float | None = None
    tokens = 0
    ema: float | None = None
    probes: dict[str, float] = {}  # EMAs of token_prob at the positions PROBES names
    step = 0
    # The wall-clock cap usually binds first: show a count, not a percentage of max_steps.
    total = settings.max_steps if settings.max_steps < UNCAPPED_STEPS else None
    bar = tqdm(total=total, disable=not progress_bar, desc=settings.variant)
    for batch in batches(stream, settings.batch_size, seed=settings.seed):
        elapsed = time.monotonic() - start
        trained = elapsed - (first_step_s or 0.0)
        step_ema = probes.get("step")
        if step >= settings.max_steps or trained >= budget_s or _learned(settings, step, step_ema):
            break
        progress = max(step / settings.max_steps, trained / budget_s)
        factor = lr_factor(progress, step, settings.warmup_steps, constant=settings.constant_lr)
        for group in optim.param_groups:
            group["lr"] = settings.lr * factor
        ids, mask, weights = collate(batch, codec.pad_id)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = forward(input_ids=ids, attention_mask=mask).logits
        logits = logits.float()
        loss = weighted_lm_loss(logits, ids, weights)
        optim.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        step += 1
        if first_step_s is None:
            first_step_s = time.monotonic() - start
        tokens += int(mask.sum())
        value = float(loss.detach())
        ema = value if ema is None else 0.98 * ema + 0.02 * value
        for name, (positions_of, keep) in PROBES.items():
            prob = token_prob(logits.detach(), ids, [positions_of(e) for e in batch])
            if prob is not None:
                last = probes.get(name)
                probes[name] = prob if last is None else keep * last + (1.0 - keep) * prob
        bar.update(1)
        if step % 10 == 0:
            rate = tokens / max(1e-9, time.monotonic() - start)
            shown = {f"{name}_p": f"{probes.get(name, 0.0):.3f}" for name in PROBES}
            bar.set_postfix(
                loss=f"{ema:.4f}", **shown, tok_s=f"{rate:.0f}", min=f"{elapsed / 60:.1f}"
            )
    bar.close()
    wall = time.monotonic() - start
    model.train(False)
    export(model, codec, out)
    return TrainResult(
        steps=step,
        tokens=tokens,
        wall_s=wall,
        final_loss=ema or float("nan"),
        merged_result_prob=probes.get("merged"),
        step_result_prob=probes.get("step"),
        operand_prob=probes.get("operand"),
        first_step_s=first_step_s,
        learned=None
        if settings.until_step_prob is None
        else probes.get("step", 0.0) >= settings.until_step_prob,
        precision=precision,
    )


def _compiled(model: Qwen2ForCausalLM) -> Qwen2ForCausalLM:
    # Dynamic shapes: batches differ in width (sorted pools), one graph serves them all.
    # suppress_errors: a machine without a working C compiler trains in eager mode instead
    # of failing at the first step of a 40-minute run.
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    compiled: Qwen2ForCausalLM = torch.compile(model, dynamic=True)  # type: ignore[assignment]
    return compiled


# What the progress bar and the card watch (teacher-forced, EMA over training batches):
# the positions of each example, and the EMA's decay. The step probe's decay is faster
# than the others': the arithmetic phase's stop rule should see the jump off the plateau.
PROBES: dict[str, tuple[Callable[[Example], tuple[int, ...]], float]] = {
    "step": (lambda e: e.step_positions, 0.95),
    "operand": (lambda e: e.operand_positions, 0.98),
    "merged": (lambda e: e.merged_positions, 0.98),
}

# The step EMA needs this many batches before it can end a phase (it starts noisy).
MIN_STEPS_BEFORE_STOP = 50


def _learned(settings: TrainSettings, step: int, step_ema: float | None) -> bool:
    return (
        settings.until_step_prob is not None
        and step >= MIN_STEPS_BEFORE_STOP
        and step_ema is not None
        and step_ema >= settings.until_step_prob
    )


def token_prob(
    logits: torch.Tensor, ids: torch.Tensor, positions: list[tuple[int, ...]]
) -> float | None:
    """Mean probability the model gives the right token at `positions` (one tuple per row).

    At result digits this is the line's sampled accuracy at temperature 1, so training can
    watch the arithmetic itself rather than a loss dominated by copy tokens; at copied
    operands, whether it finds its place in the question. None when the batch has none.
    """
    rows: list[int] = []
    cols: list[int] = []
    for row, cols_of_row in enumerate(positions):
        for col in cols_of_row:
            rows.append(row)
            cols.append(col)
    if not rows:
        return None
    r = torch.tensor(rows)
    c = torch.tensor(cols)
    probs = logits[r, c - 1].float().softmax(-1)
    return float(probs.gather(1, ids[r, c].unsqueeze(1)).mean())


def settings_dict(settings: TrainSettings) -> dict[str, object]:
    return asdict(settings)
