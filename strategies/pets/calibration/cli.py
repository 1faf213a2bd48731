"""``thinkgate calibrate pets``: sample calibration pools, fit, write the table.

    thinkgate calibrate pets --questions q.jsonl --pool 64 --average-budget 16 \\
        [--model DIR | --server URL] [--pools pools.jsonl] [--out table.json]

Questions are JSONL (``messages`` or ``prompt``, optional ``answer``), from a train or
validation split, never the test split. Pools are drawn through an in-process vLLM
engine on ``--model`` (default: the testbed base model) or a running thinkgate server
(``--server``, strategy ``plain``). ``--pools FILE`` caches them: read when the file
exists, written otherwise, so refitting for another average budget costs no sampling.
The table is what ``thinkgate serve --pets-table FILE`` loads.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from core import defaults
from strategies.pets.calibration.calibrate import build_table, fit_pools
from strategies.pets.calibration.pools import (
    Sampling,
    draw_http,
    draw_local,
    load_items,
    load_pools,
    save_pools,
)
from strategies.pets.table import DEFAULT_TABLE


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thinkgate calibrate pets", description=__doc__.split("\n")[0])
    p.add_argument("--questions", type=Path, help="calibration questions (JSONL)")
    p.add_argument("--pool", type=int, default=64, help="samples per question (default 64)")
    p.add_argument("--average-budget", type=float, required=True, help="B_bar, samples/question")
    p.add_argument("--b-max", type=int, default=64, help="most samples for one question")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", default=None, help="model directory for an in-process engine")
    src.add_argument("--server", default=None, help="URL of a running thinkgate server")
    p.add_argument("--api-key", default=None, help="bearer key for --server")
    p.add_argument("--max-n", type=int, default=16, help="--server's --max-n: samples per request")
    p.add_argument("--pools", type=Path, default=None, help="pool cache (JSONL)")
    p.add_argument("--out", type=Path, default=DEFAULT_TABLE, help="table path")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--k-max", type=int, default=32, help="longest consistency curve point")
    p.add_argument("--trials", type=int, default=4000, help="Monte Carlo trials per curve")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["pets"]:  # `thinkgate calibrate pets ...`
        args_list = args_list[1:]
    args = parser().parse_args(args_list)
    if args.pools is not None and args.pools.exists():
        records = load_pools(args.pools)
        print(f"pools: {len(records)} questions from {args.pools}", file=sys.stderr)
    else:
        if args.questions is None:
            print("error: --questions is required when no pool cache exists", file=sys.stderr)
            return 2
        items = load_items(args.questions)
        sampling = Sampling(
            pool=args.pool,
            temperature=args.temperature,
            top_p=args.top_p,
            max_tokens=args.max_tokens,
            seed=args.seed,
        )
        if args.server:
            records = draw_http(
                args.server, items, sampling, api_key=args.api_key, max_n=args.max_n
            )
        else:
            records = draw_local(str(args.model or defaults.installed().model), items, sampling)
        if args.pools is not None:
            save_pools(args.pools, records)
    pools = [r.to_pool() for r in records]
    fits = fit_pools(pools, k_max=args.k_max, trials=args.trials, seed=args.seed)
    if not fits:
        print("error: no calibration pool contains an answer", file=sys.stderr)
        return 1
    table = build_table(
        fits,
        average_budget=args.average_budget,
        b_max=args.b_max,
        calibration={
            # Which model the table belongs to: a server attaches a table by default
            # only in front of this model (server.resources.pets).
            "model": _served_model(args.server, args.api_key)
            if args.server
            else str(args.model or defaults.installed().model),
            "pool": len(records[0].answers),
            "source": str(args.questions or args.pools),
            "temperature": args.temperature,
            "seed": args.seed,
        },
    )
    table.save(args.out)
    plan = ", ".join(f"{b.pattern}:{b.budget}" for b in table.buckets)
    print(f"wrote {args.out}: {plan} (expected {table.expected_budget:.2f} samples/question)")
    return 0


def _served_model(url: str, api_key: str | None) -> str:
    """The model a thinkgate server serves (``GET /v1/models``)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    got = httpx.get(f"{url.rstrip('/')}/v1/models", headers=headers, timeout=30)
    got.raise_for_status()
    return str(got.json()["data"][0]["id"])


if __name__ == "__main__":
    raise SystemExit(main())
