"""``thinkgate bench interleaved``: two servers up side by side, driven in turn by vLLM's
own client (``vllm bench serve``) in short runs, many pairs in minutes.

``bench overhead`` starts each server anew for every pair (minutes per pair), so it gets
a handful of pairs. Here both servers stay up and take turns (A B, B A, A B, ...; the
idle one only polls its engine ring), so a pair costs two short runs. Give the same side
twice (``--a bare --b bare``) for an A/A run: two instances of one server, whose paired
ratios are what this machine measures when nothing differs, the noise floor that any
A/B on it must clear.

Sides: ``vllm`` (vLLM's OpenAI server), ``thinkgate`` (default logits processors),
``bare`` (thinkgate without logits processors: the engine vLLM's server runs), all with
the engine settings of ``bench overhead`` (``benchmarks.overhead.served``). Reported
per metric: each side's median over its runs, the paired ratio B / A (median,
interquartile range, min-max) and in how many pairs B measured higher. Writes
``benchmarks/results/interleaved/<A>-<B>-r<rate>.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Any

import testbed
from benchmarks.out_paths import LOGS, results_of
from benchmarks.overhead import METRICS, SLOW_GAPS, bench_serve, key, served
from benchmarks.servers import machine, worker_binding
from loadtests.report import git_sha

RESULTS = results_of("interleaved")
SIDES = ("vllm", "thinkgate", "bare")
SHOWN = (*METRICS, SLOW_GAPS)


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """The first and third quartiles (inclusive method; a single value is both)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def paired(a_runs: Sequence[dict[str, float]], b_runs: Sequence[dict[str, float]], metric: str
           ) -> dict[str, float]:  # fmt: skip
    """B / A per pair: median, quartiles, extremes, and the pairs where B measured more."""
    got = [(a[metric], b[metric]) for a, b in zip(a_runs, b_runs, strict=True) if a[metric]]
    r = sorted(b / a for a, b in got)
    if not r:
        return {}
    q1, q3 = quartiles(r)
    return {
        "median": statistics.median(r),
        "q1": q1,
        "q3": q3,
        "min": r[0],
        "max": r[-1],
        "b_higher": float(sum(b > a for a, b in got)),
        "pairs": float(len(got)),
    }


Runs = Sequence[dict[str, float]]


def ratio_table(a: str, b: str, runs_a: Runs, runs_b: Runs, metrics: Sequence[str]) -> list[str]:
    """Markdown rows: each side's median per metric and the paired B / A statistics."""
    lines = [
        f"| metric | {a} (A) | {b} (B) | B / A median | IQR | min-max | pairs B higher |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for m in metrics:
        s = paired(runs_a, runs_b, m)
        if not s:
            continue
        med_a = statistics.median(x[m] for x in runs_a)
        med_b = statistics.median(x[m] for x in runs_b)
        lines.append(
            f"| {m} | {med_a:.2f} | {med_b:.2f} | {s['median']:.3f} | "
            f"{s['q1']:.2f}-{s['q3']:.2f} | {s['min']:.2f}-{s['max']:.2f} | "
            f"{s['b_higher']:.0f}/{s['pairs']:.0f} |"
        )
    return lines


def report(result: dict[str, Any], command: str) -> str:
    a, b, args = result["a"], result["b"], result["args"]
    runs = result["runs"]
    lines = [
        f"# Interleaved: {b} / {a} at request rate {key(args['rate'])}",
        "",
        f"`{command}` on {result['machine']}"
        + (f" at commit {result['git']}" if result.get("git") else "")
        + (f", {result['binding']}" if result.get("binding") else "")
        + "; both servers up at once, driven in turn by "
        f"vLLM's `bench serve` (random dataset, {args['input_len']} in / "
        f"{args['output_len']} out, {args['prompts']} prompts per run, `--ignore-eos`), "
        f"{args['pairs']} pairs in alternating order, {result['seconds']:.0f} s.",
        "",
    ]
    lines += ratio_table(a, b, runs["a"], runs["b"], SHOWN)
    lines += [
        "",
        "Ratios above 1: B measured more (slower for latencies, faster for throughputs). "
        + (
            "Both sides are the same server (A/A): the spread of each ratio is the noise "
            "floor of a paired comparison on this machine."
            if a == b
            else "Compare each ratio's spread with an A/A run of the same shape."
        ),
    ]
    return "\n".join(lines) + "\n"


def _run(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    model = str(testbed.model_path("base"))
    os.environ["THINKGATE_ENGINE_SPIN_MS"] = "1"  # every engine waits alike (our plugin)
    LOGS.mkdir(parents=True, exist_ok=True)
    shape = argparse.Namespace(
        prompts=args.prompts, input_len=args.input_len, output_len=args.output_len
    )
    runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
    with ExitStack() as stack:
        urls = {
            side: stack.enter_context(
                served(name, model, LOGS / f"interleaved-{name}-{side.upper()}.log")
            )
            for side, name in (("a", args.a), ("b", args.b))
        }
        for url in urls.values():  # the CPU kernels build their primitives on first use
            bench_serve(url, model, model, float("inf"), shape)
        started = time.monotonic()
        bar = tqdm(total=args.pairs, desc="pairs", unit="pair", file=sys.stderr)
        for i in range(args.pairs):
            for side in ("a", "b") if i % 2 == 0 else ("b", "a"):
                runs[side].append(bench_serve(urls[side], model, model, args.rate, shape))
            a, b = runs["a"][-1], runs["b"][-1]
            print(
                f"[interleaved] pair {i + 1}/{args.pairs}: p99 ITL {a['p99_itl_ms']:.2f} / "
                f"{b['p99_itl_ms']:.2f} ms, p50 TPOT {a['median_tpot_ms']:.2f} / "
                f"{b['median_tpot_ms']:.2f} ms",
                flush=True,
            )
            bar.update(1)
        bar.close()
        seconds = time.monotonic() - started
    return {
        "a": args.a,
        "b": args.b,
        "runs": runs,
        "seconds": seconds,
        "machine": machine(),
        "binding": worker_binding(),
        "git": git_sha(),
        "args": dict(vars(args)),
    }


def add_run_shape(parser: argparse.ArgumentParser, *, rate: float) -> None:
    """The options of a paired run: pairs, request rate, prompts per run and lengths."""
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--rate", type=float, default=rate, help="requests/s (inf: all at once)")
    parser.add_argument("--prompts", type=int, default=150, help="prompts per run")
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench interleaved", description=__doc__)
    parser.add_argument("--a", choices=SIDES, default="vllm", help="side A (the baseline)")
    parser.add_argument("--b", choices=SIDES, default="bare", help="side B")
    add_run_shape(parser, rate=15.0)
    args = parser.parse_args(list(argv) if argv is not None else None)
    command = "thinkgate bench interleaved " + " ".join(sys.argv[1:] if argv is None else argv)
    result = _run(args)
    text = report(result, command.strip())
    stem = f"{args.a}-{args.b}-r{key(args.rate)}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2))
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
