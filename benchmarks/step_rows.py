"""``thinkgate bench step-rows``: what one decoding step costs by the rows in it.

Why a strategy's questions per second at a few clients follow its rounds more than its
tokens: on the CPU testbed a step has a fixed cost that more rows share. ``--rows`` rows
decode ``--tokens`` tokens each (EOS ignored) through the gateway's plain strategy, as
requests of at most ``--n`` samples sent together; the wall time over the tokens per row
is the step's cost, and over all tokens a token's. Each row count runs ``--repeats``
times, in turn with the others; the table has the medians.

Writes ``benchmarks/results/step_rows/step-rows.{md,json}``.

    thinkgate bench step-rows [--url http://127.0.0.1:8012]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.out_paths import LOGS, beside, results_of
from benchmarks.servers import given_or_thinkgate, machine

RESULTS = results_of("step_rows")
PROMPT = "Compute 3+4*2 mod 10."


async def _one_run(client: Any, model: str, rows: int, args: argparse.Namespace) -> float:
    """Seconds for ``rows`` rows of ``--tokens`` tokens each, all in flight at once."""
    sizes = [args.n] * (rows // args.n) + ([rows % args.n] if rows % args.n else [])
    t0 = time.monotonic()
    got = await asyncio.gather(
        *(
            client.completions.create(
                model=model,
                prompt=PROMPT,
                n=size,
                max_tokens=args.tokens,
                temperature=1.0,
                seed=i,
                extra_body={"ignore_eos": True},
            )
            for i, size in enumerate(sizes)
        )
    )
    seconds = time.monotonic() - t0
    made = sum(r.usage.completion_tokens for r in got)
    if made != rows * args.tokens:
        raise RuntimeError(f"{rows} rows made {made} tokens, not {rows * args.tokens}")
    return seconds


async def run(url: str, args: argparse.Namespace) -> dict[int, list[float]]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=1800)
    model = (await client.models.list()).data[0].id
    await _one_run(client, model, args.rows[0], args)  # warm-up, not kept
    seconds: dict[int, list[float]] = {r: [] for r in args.rows}
    for _ in range(args.repeats):
        for rows in args.rows:
            seconds[rows].append(await _one_run(client, model, rows, args))
    await client.close()
    return seconds


def report(seconds: dict[int, list[float]], args: argparse.Namespace) -> str:
    lines = [
        "# One decoding step's cost by its rows (thinkgate bench step-rows)",
        "",
        f"Rows decoding {args.tokens} tokens each (EOS ignored) through the plain strategy, "
        f"in requests of at most {args.n} samples sent together; medians of {args.repeats} "
        "runs per row count, taken in turn.",
        "",
        "| rows | seconds | ms a step | ms a token | a step against 1 row's |",
        "|---|---|---|---|---|",
    ]
    first = statistics.median(seconds[args.rows[0]]) / args.tokens
    for rows, runs in seconds.items():
        wall = statistics.median(runs)
        step = wall / args.tokens
        lines.append(
            f"| {rows} | {wall:.2f} | {1000 * step:.1f} | {1000 * step / rows:.2f} | "
            f"{step / first:.2f}x |"
        )
    lines += [
        "",
        f"Machine: {machine()}.",
        "",
        f"Command: `thinkgate bench step-rows {' '.join(args.argv)}`",
        "",
    ]
    return "\n".join(lines)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="thinkgate bench step-rows", description=__doc__.split("\n")[0]
    )
    p.add_argument("--rows", default="1,8,16,32,64,128", help="row counts, comma-separated")
    p.add_argument("--tokens", type=int, default=128, help="tokens each row decodes")
    p.add_argument("--n", type=int, default=16, help="samples per request (the server's cap)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--url", help="a running thinkgate server (default: start one)")
    p.add_argument("--out", default=str(RESULTS / "step-rows"), help="path prefix")
    args = p.parse_args(argv)
    args.rows = [int(x) for x in args.rows.split(",") if x]
    if not args.rows or min(args.rows) < 1:
        p.error("--rows: positive counts")
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    with given_or_thinkgate(args.url, log=LOGS / "step-rows-thinkgate.log") as url:
        seconds = asyncio.run(run(url, args))
    out = Path(args.out)
    beside(out, ".json").write_text(json.dumps({str(k): v for k, v in seconds.items()}))
    text = report(seconds, args)
    beside(out, ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
