"""``thinkgate bench segment-cost``: what the tree's way of calling the engine costs a
token, at the same rows.

Why the tree's token saving buys less time than it saves tokens. Besides running fewer
rows (``bench step-rows``: a step has a fixed cost that fewer rows share), the tree asks
for its tokens in one request per segment, each on the ids the request before it left in
the prefix cache, and with every sampled token's logprob (its signal); self-consistency
asks for a whole trace in one request, without logprobs. Here ``--rows`` chains decode
``--tokens`` tokens each (EOS ignored) through one engine built as ``thinkgate serve``
builds its own, driven through the ``Engine`` protocol (no HTTP), four ways in turn: one
request a chain, or one request per ``--segment`` tokens on the chain's ids so far
(prompts of one id past a cache block, as the tree aligns them), each with and without
the sampled tokens' logprobs. One request a chain at ``--full`` rows (the server's
``max_num_seqs``, what self-consistency keeps busy at 8 clients) runs in the same turn as
the reference. Per repeat, each way's tokens a second over the one-request way's at its
rows in that repeat; the table gives the geometric mean of those ratios and its 95%
interval.

    .venv/bin/python -m benchmarks.cli segment-cost [--rows 24] [--repeats 10]

Writes ``benchmarks/results/segment_cost/segment-cost.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.out_paths import beside, results_of
from benchmarks.paired import ratio_interval
from benchmarks.servers import machine
from core.engine import Engine, GenerateRequest, SamplingConfig
from engines.local import engine_wait
from loadtests.report import git_sha

RESULTS = results_of("segment_cost")
# Random prompt ids from here up: 0-2 are the end and chat marks; the thinking marks
# (3, 4) may come up, as in any trace.
VOCAB_LOW = 3
BASE = "whole, no logprobs"


@dataclass(frozen=True, slots=True)
class Way:
    """One way of drawing every chain's tokens."""

    label: str
    segmented: bool
    logprobs: bool
    full: bool = False  # at --full rows instead of --rows


TREES = Way("segments, logprobs (the tree's)", segmented=True, logprobs=True)
FULL = Way(
    "whole, no logprobs, full rows (self-consistency's)", segmented=False, logprobs=False, full=True
)
WAYS = (
    Way(BASE, segmented=False, logprobs=False),
    Way("whole, logprobs", segmented=False, logprobs=True),
    Way("segments, no logprobs", segmented=True, logprobs=False),
    TREES,
    FULL,
)


def _rows_of(way: Way, args: argparse.Namespace) -> int:
    return int(args.full if way.full else args.rows)


async def _chain(
    engine: Engine, ids: list[int], way: Way, args: argparse.Namespace, chain: int, run: int
) -> int:
    """One chain's ``--tokens`` tokens, drawn as ``way`` draws them; the tokens made."""
    step = args.segment if way.segmented else args.tokens
    made = 0
    for k in range(args.tokens // step):
        got = await engine.generate(
            GenerateRequest(
                request_id=f"segcost-{run}-{chain}-{k}",
                prompt_token_ids=tuple(ids),
                sampling=SamplingConfig(
                    max_tokens=step,
                    ignore_eos=True,
                    logprobs=way.logprobs,
                    seed=1000 * chain + k,
                ),
            )
        )
        ids = [*ids, *got[0].token_ids]
        made += len(got[0].token_ids)
    return made


async def _one_run(
    engine: Engine, way: Way, args: argparse.Namespace, rng: random.Random, run: int
) -> float:
    """Tokens a second of every chain drawn at once, as ``way`` draws them."""
    rows = _rows_of(way, args)
    # Fresh prompts each run: nothing of an earlier run's chains is in the cache.
    prompts = [
        [rng.randrange(VOCAB_LOW, args.vocab) for _ in range(args.prompt)] for _ in range(rows)
    ]
    t0 = time.monotonic()
    made = await asyncio.gather(
        *(_chain(engine, p, way, args, c, run) for c, p in enumerate(prompts))
    )
    seconds = time.monotonic() - t0
    if sum(made) != rows * args.tokens:
        raise RuntimeError(f"{way.label}: {sum(made)} tokens, not {rows * args.tokens}")
    return sum(made) / seconds


async def _measure(engine: Engine, args: argparse.Namespace) -> dict[str, list[float]]:
    """Tokens a second per way and repeat; the ways in turn, the first one turned each
    repeat (none always runs first on a machine that drifts)."""
    from tqdm import tqdm

    rng = random.Random(args.seed)
    for i, way in enumerate(WAYS):  # warm-up: the CPU kernels build on first use
        await _one_run(engine, way, args, rng, -1 - i)
    rates: dict[str, list[float]] = {w.label: [] for w in WAYS}
    bar = tqdm(total=args.repeats * len(WAYS), desc="runs", file=sys.stderr)
    for r in range(args.repeats):
        turn = r % len(WAYS)
        for way in WAYS[turn:] + WAYS[:turn]:
            rates[way.label].append(
                await _one_run(engine, way, args, rng, r * len(WAYS) + WAYS.index(way))
            )
            bar.update(1)
    bar.close()
    return rates


def ratios(rates: Mapping[str, Sequence[float]], label: str) -> list[float]:
    """``label``'s tokens a second over the base way's, repeat by repeat."""
    return [a / b for a, b in zip(rates[label], rates[BASE], strict=True)]


def report(
    rates: Mapping[str, Sequence[float]], args: argparse.Namespace, meta: Mapping[str, Any]
) -> str:
    lines = [
        "# What the tree's way of calling the engine costs a token (thinkgate bench segment-cost)",
        "",
        f"{args.rows} chains decode {args.tokens} tokens each (EOS ignored) through one engine "
        f"built as `thinkgate serve` builds its own, without HTTP: in one request a chain, or "
        f"in one request per {args.segment} tokens on the chain's ids so far (prompts of "
        f"{args.prompt} random ids, so each request reads all but its last id from the prefix "
        f"cache), with or without the sampled tokens' logprobs; and in one request a chain at "
        f"{args.full} rows. {args.repeats} repeats, the ways in turn, seed {args.seed}; "
        f"{meta['seconds'] / 60:.1f} min.",
        "",
        f"| way | rows | tokens/s, median (runs) | against `{BASE}` at {args.rows} rows, "
        "geometric mean [95% interval] |",
        "|---|---|---|---|",
    ]
    for way in WAYS:
        got = rates[way.label]
        mean, lo, hi = ratio_interval(ratios(rates, way.label))
        shown = "1.00x" if way.label == BASE else f"{mean:.2f}x [{lo:.2f}, {hi:.2f}]"
        rate = f"{statistics.median(got):.0f} ({min(got):.0f}-{max(got):.0f})"
        lines.append(f"| {way.label} | {_rows_of(way, args)} | {rate} | {shown} |")
    tree, _, _ = ratio_interval(ratios(rates, TREES.label))
    full, _, _ = ratio_interval(ratios(rates, FULL.label))
    lines += [
        "",
        f"At {args.rows} rows the tree's way makes {tree:.2f}x the tokens a second of one "
        f"request a chain, which makes {1 / full:.2f}x those of {args.full} rows: "
        f"{tree / full:.2f}x in all.",
        "",
        f"Machine: {meta['machine']}. Commit {meta['git']}.",
        "",
        f"Command: `{meta['command']}`",
        "",
    ]
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="thinkgate bench segment-cost", description=__doc__.split("\n")[0]
    )
    p.add_argument("--rows", type=int, default=24, help="chains at once (the tree's at 8 clients)")
    p.add_argument("--full", type=int, default=64, help="the reference's rows (max_num_seqs)")
    p.add_argument("--tokens", type=int, default=192, help="tokens each chain decodes")
    p.add_argument("--segment", type=int, default=32, help="tokens per request, segmented")
    p.add_argument("--prompt", type=int, default=33, help="prompt ids: one past a cache block")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "segment-cost"), help="path prefix")
    args = p.parse_args(argv)
    if min(args.rows, args.full, args.tokens, args.segment, args.prompt, args.repeats) < 1:
        p.error("--rows, --full, --tokens, --segment, --prompt, --repeats: positive")
    if args.tokens % args.segment:
        p.error("--tokens must be a multiple of --segment")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


async def _main(args: argparse.Namespace) -> dict[str, list[float]]:
    from transformers import AutoConfig

    from engines.local.engine import LocalEngine
    from server.settings import Settings

    settings = Settings()
    args.vocab = int(AutoConfig.from_pretrained(settings.model_path).vocab_size)
    engine = LocalEngine.start(settings)
    try:
        return await _measure(engine, args)
    finally:
        await engine.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    engine_wait.export(None)  # as the server does
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t0 = time.monotonic()
    rates = asyncio.run(_main(args))
    meta = {
        "machine": machine(),
        "git": git_sha(),
        "seconds": time.monotonic() - t0,
        "command": "thinkgate bench segment-cost " + " ".join(args.argv),
    }
    out = Path(args.out)
    text = report(rates, args, meta)
    beside(out, ".json").write_text(
        json.dumps({"rates": rates, **meta, "args": vars(args)}, indent=2)
    )
    beside(out, ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
