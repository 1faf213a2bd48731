"""``thinkgate train-predictor``: train the budget predictor of a model, save it beside it.

1. Traces: the model itself answers testbed train-split questions (or ``--prompts``'
   questions: ``thinkgate fit`` passes its workload's fit part) through the vLLM
   engine (temperature 1, one sample each); traces whose thinking never closed are
   dropped.
2. Features: one ``transformers`` forward pass per batch of traces; the final (normed)
   hidden state at every position that predicts a thinking token or ``</think>``, the
   token it predicts, and the remaining length ``L`` (:func:`remaining_lengths`).
3. Training: Gamma NLL at the true next token (:func:`gamma_nll`), AdamW, tqdm progress,
   a wall-clock cap; 10% of the traces are held out for the metrics written into
   ``bg_predictor/config.json``.

Run it under the ``thinkgate`` entry point (or ``python -m testbed.predictor_cli``):
vLLM spawns processes, so this module only starts an engine from ``main``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

import torch

from kernels.guidance.predictor import (
    BudgetPredictor,
    PredictorConfig,
    activate,
    boundary_token_ids,
    encode_length,
    gamma_nll,
    remaining_lengths,
    save_predictor,
)


@dataclass(frozen=True, slots=True)
class Traces:
    """Prompts and the generated ids of the traces that closed thinking."""

    prompts: list[list[int]]
    outputs: list[list[int]]
    drawn: int


@dataclass(frozen=True, slots=True)
class Features:
    hidden: torch.Tensor  # [M, d] fp32
    token: torch.Tensor  # [M] int64: the token the position predicts
    length: torch.Tensor  # [M] fp32: remaining thinking length L >= 1
    boundary: torch.Tensor  # [M] bool: the position is a line start (where guidance runs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thinkgate train-predictor", description=__doc__)
    p.add_argument("--model", type=Path, default=None, help="model dir (default: testbed base)")
    p.add_argument("--traces", type=int, default=1200, help="traces drawn from the model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=420, help="per trace")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--minutes", type=float, default=4.0, help="wall-clock cap on training")
    p.add_argument("--out", type=Path, default=None, help="model dir to write into")
    p.add_argument(
        "--prompts",
        type=Path,
        default=None,
        help="JSONL questions (messages or prompt) to draw the traces on, cycled "
        "(default: testbed train-split questions); `thinkgate fit` passes its fit part",
    )
    p.add_argument("--no-progress", action="store_true")
    return p


def resolve_tokens(model_dir: Path) -> tuple[int, tuple[int, ...], int]:
    """``(</think> id, newline token ids, vocab size)`` from the model's tokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    vocab = int(AutoConfig.from_pretrained(str(model_dir)).vocab_size)
    think_end = tok.convert_tokens_to_ids("</think>")
    if not isinstance(think_end, int) or think_end == tok.unk_token_id:
        raise SystemExit(f"{model_dir}: the tokenizer has no </think> token")
    decoded = [str(tok.decode([i])) for i in range(min(vocab, len(tok)))]
    return think_end, boundary_token_ids(decoded), vocab


def chats(n: int, seed: int, prompts: Path | None) -> list[list[dict[str, str]]]:
    """``n`` chats to draw traces on: ``prompts``' questions in turn (each drawn again
    at temperature 1 when there are fewer than ``n``), or testbed train-split questions."""
    if prompts is None:
        from testbed.task import make_questions

        return [
            [{"role": "user", "content": q.prompt}] for q in make_questions("train", n, seed=seed)
        ]
    from server.calibrate.workload import read_workload

    qs = read_workload(prompts).questions
    if not qs:
        raise SystemExit(f"{prompts}: no questions")
    return [qs[i % len(qs)].chat() for i in range(n)]


def draw_traces(
    model_dir: Path,
    n: int,
    *,
    seed: int,
    max_tokens: int,
    progress: bool = True,
    prompts: Path | None = None,
) -> Traces:
    """``n`` traces at temperature 1 from the vLLM engine (``chats``)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from kernels.offline_engine import cpu_llm

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    think_end = tok.convert_tokens_to_ids("</think>")
    encoded: list[list[int]] = []
    for chat in chats(n, seed, prompts):
        text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        encoded.append(list(tok(text, add_special_tokens=False).input_ids))
    llm = cpu_llm(model_dir, seed=seed)
    params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=None)
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in encoded], params, use_tqdm=progress
    )
    kept_prompts, kept_outputs = [], []
    for prompt, out in zip(encoded, outs, strict=True):
        ids = list(out.outputs[0].token_ids)
        if think_end in ids:
            kept_prompts.append(prompt)
            kept_outputs.append(ids)
    del llm
    gc.collect()
    return Traces(kept_prompts, kept_outputs, drawn=n)


@torch.no_grad()
def collect_features(
    model_dir: Path,
    traces: Traces,
    think_end: int,
    boundary_ids: Sequence[int],
    *,
    batch: int = 32,
    progress: bool = True,
) -> list[Features]:
    """Per trace: hidden states of the positions predicting ``g_0 .. g_T = </think>``."""
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM

    model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32
    )
    model.train(False)
    boundary_set = set(boundary_ids)
    out: list[Features] = []
    order = range(0, len(traces.prompts), batch)
    for start in tqdm(order, desc="hidden states", disable=not progress):
        chunk = range(start, min(start + batch, len(traces.prompts)))
        seqs, spans = [], []
        for i in chunk:
            prompt, ids = traces.prompts[i], traces.outputs[i]
            end = ids.index(think_end)
            seqs.append(prompt + ids[: end + 1])
            spans.append((len(prompt), end))
        width = max(len(s) for s in seqs)
        input_ids = torch.zeros(len(seqs), width, dtype=torch.long)
        attention = torch.zeros(len(seqs), width, dtype=torch.long)
        for j, s in enumerate(seqs):
            input_ids[j, : len(s)] = torch.tensor(s)
            attention[j, : len(s)] = 1
        # The decoder stack alone: its last_hidden_state is the normed final hidden state,
        # what vLLM's compute_logits receives.
        backbone = cast(torch.nn.Module, model.model)
        hidden = backbone(input_ids=input_ids, attention_mask=attention).last_hidden_state
        for j, (prompt_len, think_len) in enumerate(spans):
            # Position prompt_len - 1 + t predicts g_t, for t = 0 .. T (g_T = </think>).
            pos = torch.arange(prompt_len - 1, prompt_len + think_len)
            tokens = input_ids[j, pos + 1]
            prev = input_ids[j, pos]
            at_line_start = torch.tensor(
                [t == 0 or int(p) in boundary_set for t, p in enumerate(prev.tolist())]
            )
            out.append(
                Features(
                    hidden=hidden[j, pos].float().clone(),
                    token=tokens.clone(),
                    length=remaining_lengths(think_len),
                    boundary=at_line_start,
                )
            )
    return out


def _cat(parts: Sequence[Features]) -> Features:
    return Features(
        hidden=torch.cat([p.hidden for p in parts]),
        token=torch.cat([p.token for p in parts]),
        length=torch.cat([p.length for p in parts]),
        boundary=torch.cat([p.boundary for p in parts]),
    )


@torch.no_grad()
def evaluate(predictor: BudgetPredictor, data: Features) -> dict[str, float]:
    """Held-out metrics: NLL, |log length error| of the Gamma median, calibration."""
    from kernels.guidance.gamma import reliability_mask

    a_raw, l_raw = predictor.raw_at(data.hidden, data.token)
    alpha, rate = (
        torch.nn.functional.softplus(a_raw) + 1e-4,
        torch.nn.functional.softplus(l_raw) + 1e-4,
    )
    x = encode_length(data.length)
    nll = gamma_nll(alpha, rate, x)
    cdf = torch.special.gammainc(alpha, rate * x)
    mean_tokens = torch.expm1(alpha / rate)
    b = data.boundary
    return {
        "nll": float(nll.mean()),
        "nll_at_line_starts": float(nll[b].mean()) if b.any() else math.nan,
        # |log(1+L) - E[x]|: 0.1 is a 10% length error.
        "abs_log_length_error": float((alpha / rate - x).abs().mean()),
        "median_abs_token_error": float((mean_tokens - data.length).abs().median()),
        # A calibrated predictor puts the true length at a uniform CDF level: mean 0.5.
        "mean_cdf_at_truth": float(cdf.mean()),
        "share_reliable_at_truth": float(reliability_mask(alpha, rate).float().mean()),
        "positions": float(x.numel()),
    }


def train(
    train_data: Features,
    val_data: Features,
    config: PredictorConfig,
    *,
    lr: float,
    batch_size: int,
    epochs: int,
    minutes: float,
    seed: int,
    progress: bool,
) -> tuple[BudgetPredictor, dict[str, object]]:
    from tqdm import tqdm

    torch.manual_seed(seed)
    predictor = BudgetPredictor(config)
    x_all = encode_length(train_data.length)
    predictor.init_from_targets(x_all)
    baseline = evaluate(predictor, val_data)
    opt = torch.optim.AdamW(predictor.parameters(), lr=lr, weight_decay=1e-4)
    n = x_all.numel()
    steps_per_epoch = max(1, math.ceil(n / batch_size))
    total = steps_per_epoch * epochs
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=0.05)
    deadline = time.monotonic() + minutes * 60.0
    started = time.monotonic()
    step = 0
    bar = tqdm(total=total, desc="train predictor", disable=not progress)
    gen = torch.Generator().manual_seed(seed)
    stopped_early = False
    for _epoch in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, batch_size):
            idx = perm[i : i + batch_size]
            a_raw, l_raw = predictor.raw_at(train_data.hidden[idx], train_data.token[idx])
            alpha, rate = activate(a_raw), activate(l_raw)
            loss = gamma_nll(alpha, rate, x_all[idx]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(predictor.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            bar.update(1)
            if step % 20 == 0:
                bar.set_postfix(nll=f"{float(loss.detach()):.3f}")
            if time.monotonic() > deadline:
                stopped_early = True
                break
        if stopped_early:
            break
    bar.close()
    predictor.eval()
    metrics = evaluate(predictor, val_data)
    record: dict[str, object] = {
        "steps": step,
        "epochs_planned": epochs,
        "stopped_by_time_cap": stopped_early,
        "train_seconds": round(time.monotonic() - started, 1),
        "train_positions": n,
        "val": {k: round(v, 4) for k, v in metrics.items()},
        "val_marginal_baseline": {k: round(v, 4) for k, v in baseline.items()},
    }
    return predictor, record


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    import testbed

    model_dir: Path = args.model if args.model is not None else testbed.model_path("base")
    out_dir: Path = args.out if args.out is not None else model_dir
    progress = not args.no_progress
    random.seed(args.seed)
    t0 = time.monotonic()
    think_end, boundary_ids, vocab = resolve_tokens(model_dir)
    traces = draw_traces(
        model_dir,
        args.traces,
        seed=args.seed,
        max_tokens=args.max_tokens,
        progress=progress,
        prompts=args.prompts,
    )
    if len(traces.outputs) < 10:
        print(
            f"only {len(traces.outputs)} of {traces.drawn} traces closed thinking; "
            "is the model trained?",
            file=sys.stderr,
        )
        return 1
    t_traces = time.monotonic() - t0
    feats = collect_features(model_dir, traces, think_end, boundary_ids, progress=progress)
    rng = random.Random(args.seed)
    idx = list(range(len(feats)))
    rng.shuffle(idx)
    n_val = max(1, len(idx) // 10)
    val, tr = _cat([feats[i] for i in idx[:n_val]]), _cat([feats[i] for i in idx[n_val:]])
    config = PredictorConfig(
        hidden_size=int(tr.hidden.shape[1]),
        vocab_size=vocab,
        width=args.width,
        rank=args.rank,
        think_end_id=think_end,
        boundary_token_ids=boundary_ids,
    )
    predictor, record = train(
        tr,
        val,
        config,
        lr=args.lr,
        batch_size=args.batch_size,
        epochs=args.epochs,
        minutes=args.minutes,
        seed=args.seed,
        progress=progress,
    )
    lengths = [o.index(think_end) for o in traces.outputs]
    record.update(
        {
            "model": str(testbed.portable_path(model_dir)),
            "prompts": "testbed train split" if args.prompts is None else args.prompts.name,
            "traces_drawn": traces.drawn,
            "traces_closed": len(traces.outputs),
            "mean_thinking_tokens": round(sum(lengths) / len(lengths), 1),
            "val_traces": n_val,
            "seed": args.seed,
            "trace_seconds": round(t_traces, 1),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    )
    predictor.config = replace(config, training=record)
    path = save_predictor(out_dir, predictor)
    print(json.dumps({"saved": str(path), **record}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
