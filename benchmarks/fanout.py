"""Fan-out: N samples as ONE ``n = N`` request versus N separate requests.

How peers fan out (read in their source): its_hub sends N separate chat requests concurrently
(asyncio, semaphore 32); optillm's self-consistency loops over them one by one. The
sampling strategies of thinkgate send one engine request with ``n = N`` (the prompt's
KV cache is shared, one HTTP round trip). Same server, same run, same questions,
equal samples (temperature 1, the same ``max_tokens``); the three modes are
interleaved per question so that load drifts hit them alike:

  one-request   1 chat request with ``n = N`` (strategy ``plain``)
  concurrent    N chat requests with ``n = 1``, all in flight at once (its_hub)
  sequential    N chat requests with ``n = 1``, one after another (optillm)

Reports wall time and completion tokens per second, and their ratios to one-request.
Writes ``benchmarks/results/fanout/fanout.md``.

    .venv/bin/python -m benchmarks.fanout [--ns 8,16,32] [--questions 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import ROOT, machine, thinkgate
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("fanout")
MODES = ("one-request", "concurrent", "sequential")


@dataclass(frozen=True, slots=True)
class _Trial:
    mode: str
    n: int
    wall_s: float
    completion_tokens: int
    prompt_tokens: int


# A long prompt: worked questions before the one asked (the testbed's tokenizer is one
# token per character, so ``context`` characters are about as many prompt tokens).
FILLER = "Compute 1+2 mod 10. 3 is the answer. "


def _content(q: Question, context: int) -> str:
    if context <= 0:
        return q.prompt
    return (FILLER * (context // len(FILLER) + 1))[:context] + q.prompt


async def _trial(
    client: Any, model: str, q: Question, mode: str, n: int, max_tokens: int, context: int = 0
) -> _Trial:
    kw: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": _content(q, context)}],
        "temperature": 1.0,
        "max_tokens": max_tokens,
        "extra_headers": {"X-Strategy": "plain"},
    }
    if context > 0:  # garbage-in: fix the work, or answers of random length decide
        kw["extra_body"] = {"ignore_eos": True}
    t0 = time.perf_counter()
    if mode == "one-request":
        responses = [await client.chat.completions.create(n=n, **kw)]
    elif mode == "concurrent":
        responses = list(
            await asyncio.gather(*(client.chat.completions.create(**kw) for _ in range(n)))
        )
    else:
        responses = [await client.chat.completions.create(**kw) for _ in range(n)]
    wall = time.perf_counter() - t0
    assert sum(len(r.choices) for r in responses) == n
    return _Trial(
        mode=mode,
        n=n,
        wall_s=wall,
        completion_tokens=sum(r.usage.completion_tokens for r in responses),
        prompt_tokens=sum(r.usage.prompt_tokens for r in responses),
    )


async def run(
    url: str, questions: Sequence[Question], ns: Sequence[int], max_tokens: int, context: int = 0
) -> list[_Trial]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=900)
    model = (await client.models.list()).data[0].id
    # Warm-up: first requests pay one-off costs (allocation, logits-processor set-up).
    await _trial(client, model, questions[0], "one-request", 4, max_tokens, context)
    await _trial(client, model, questions[0], "concurrent", 4, max_tokens, context)
    from tqdm import tqdm

    trials: list[_Trial] = []
    bar = tqdm(total=len(ns) * len(questions) * len(MODES), desc="trials", file=sys.stderr)
    for n in ns:
        for i, q in enumerate(questions):
            order = MODES[i % 3 :] + MODES[: i % 3]  # rotate which mode goes first
            for mode in order:
                trials.append(await _trial(client, model, q, mode, n, max_tokens, context))
                bar.update(1)
    bar.close()
    return trials


def _summarise(trials: Sequence[_Trial], ns: Sequence[int]) -> list[str]:
    """Medians per mode, and medians of the PAIRED ratios (each trial against the
    one-request trial of the same question, run back to back), which cancel most of
    the load drift of a shared machine."""
    lines = [
        "| N | mode | wall s (median) | completion tok/s (median) | prompt tokens billed "
        "| wall / one-request (paired median) | tok/s / one-request (paired median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in ns:
        by_mode = {m: [t for t in trials if t.n == n and t.mode == m] for m in MODES}
        base = by_mode["one-request"]
        for mode in MODES:
            ts = by_mode[mode]
            wall = statistics.median(t.wall_s for t in ts)
            tps = statistics.median(t.completion_tokens / t.wall_s for t in ts)
            prompt = statistics.median(t.prompt_tokens for t in ts)
            wall_ratio = statistics.median(
                t.wall_s / b.wall_s for t, b in zip(ts, base, strict=True)
            )
            tps_ratio = statistics.median(
                (t.completion_tokens / t.wall_s) / (b.completion_tokens / b.wall_s)
                for t, b in zip(ts, base, strict=True)
            )
            lines.append(
                f"| {n} | {mode} | {wall:.2f} | {tps:.0f} | {prompt:.0f} | "
                f"{wall_ratio:.2f}x | {tps_ratio:.2f}x |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ns", default="8,16,32")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--url", default=None, help="a running thinkgate server (else start one)")
    parser.add_argument(
        "--context",
        type=int,
        default=0,
        help="characters (testbed: tokens) of worked questions before each question; "
        "then answers are fixed-length (ignore_eos) and the table goes to long.md",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    ns = [int(x) for x in args.ns.split(",")]
    questions = make_questions("test", args.questions, seed=args.seed, min_ops=6, max_ops=10)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.url:
        trials = asyncio.run(run(args.url, questions, ns, args.max_tokens, args.context))
    else:
        log = LOGS / "fanout-server.log"
        # No reward engine: this measures generation only. n up to max(ns) in one request.
        flags = ("--reward-model", "none", "--max-n", str(max(ns)))
        with thinkgate(model_path("base"), *flags, log=log) as url:
            trials = asyncio.run(run(url, questions, ns, args.max_tokens, args.context))
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    long = args.context > 0
    lines = [
        "# Fan-out: one `n = N` request versus N separate requests"
        + (f", {args.context}-token prompts" if long else ""),
        "",
        f"Same thinkgate server and run; {len(questions)} testbed questions (test split, 6-10 "
        f"operations) per N, temperature 1, max_tokens {args.max_tokens}, the three modes "
        "interleaved (rotated order) per question; medians over questions. `concurrent` is "
        "how its_hub fans out (N HTTP calls at once), `sequential` how optillm's "
        "self-consistency does (a loop). Ratios are against `one-request` at the same N "
        "(wall: lower is better; tok/s: higher is better).",
        "",
        *_summarise(trials, ns),
        "",
        f"Machine: {machine()}, shared with other jobs (load varies; compare within the run). "
        f"Commit {sha}.",
        "",
        f"Command: `.venv/bin/python -m benchmarks.fanout --ns {args.ns} --questions "
        f"{args.questions} --max-tokens {args.max_tokens} --seed {args.seed}"
        + (f" --context {args.context}`" if long else "`"),
        "",
    ]
    if long:
        lines.insert(
            3,
            f"Each prompt carries {args.context} characters of worked questions first (about as "
            "many tokens: the testbed tokenizer is per character); answers run to max_tokens "
            "(ignore_eos). vLLM's prefix cache is on (its V1 default), so the separate "
            "requests reuse the prompt's KV blocks after the first prefill, as its_hub "
            "relies on.\n",
        )
    (RESULTS / ("long.md" if long else "fanout.md")).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
