"""Run a JSONL file of questions as one PETS batch on a thinkgate server.

    python -m server.batches.pets.cli --in q.jsonl --out a.jsonl \\
        --server http://127.0.0.1:8000 --average-budget 8 [--cap 32] [--round-size 16]

Input lines: ``{"custom_id": ..., "body": {"messages": [...]}}`` (OpenAI batch input;
``method``/``url`` fields are accepted and ignored). Output: the server's JSONL, one
line per question (``response.body.thinkgate`` has samples, votes and the answer).
Progress comes from the job's SSE stream; the run's totals are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx
from tqdm import tqdm


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m server.batches.pets.cli")
    p.add_argument("--in", dest="input", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--server", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default=None)
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--total-budget", type=int)
    budget.add_argument("--average-budget", type=float)
    p.add_argument("--cap", type=int, default=None)
    p.add_argument("--round-size", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    params = {
        k: v
        for k, v in {
            "total_budget": args.total_budget,
            "average_budget": args.average_budget,
            "cap": args.cap,
            "round_size": args.round_size,
            "seed": args.seed,
        }.items()
        if v is not None
    }
    headers = {"Content-Type": "application/jsonl"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    with httpx.Client(base_url=args.server.rstrip("/"), headers=headers, timeout=None) as client:
        resp = client.post("/v1/pets/batches", params=params, content=args.input.read_bytes())
        if resp.status_code != 200:
            print(f"error {resp.status_code}: {resp.text}", file=sys.stderr)
            return 1
        job = resp.json()
        bar = tqdm(total=job["pets"]["total_budget"], desc=job["id"], unit="sample")
        with client.stream("GET", f"/v1/pets/batches/{job['id']}/events") as events:
            for line in events.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                job = json.loads(line[len("data: ") :])
                bar.n = job["pets"]["samples_drawn"]
                bar.refresh()
        bar.close()
        if job["status"] != "completed":
            print(f"batch {job['id']} ended {job['status']}: {job.get('errors')}", file=sys.stderr)
            return 1
        output = client.get(f"/v1/pets/batches/{job['id']}/output")
        output.raise_for_status()
        args.out.write_bytes(output.content)
    pets = job["pets"]
    print(
        f"{job['request_counts']['total']} questions, {pets['samples_drawn']} samples "
        f"(budget {pets['total_budget']}), {pets['rounds']} rounds -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
