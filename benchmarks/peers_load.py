"""DeepConf and self-consistency against its_hub at 1, 4 and 16 clients (``thinkgate bench
peers --load``).

Both stacks up at once, the same engine settings: thinkgate serving the testbed ``base``
model in process (``--reward-model none --prm-model none``), and vLLM's own server with
its_hub's IaaS (self-consistency) in front. Cells: thinkgate DeepConf@N (its default,
load-aware schedule), thinkgate self-consistency@N, its_hub self-consistency@N; each at 1,
4 and 16 clients (questions in flight). Every round runs every cell once, in a rotated
order, so that the machine's drift hits them alike; ``--rounds`` rounds (at least 3).

Per cell: questions per second (median of rounds, range), accuracy, completion and
prompt tokens billed per question, p50/p99 latency per question, and for DeepConf the
round sizes its schedule chose (from the ``thinkgate`` object). Ratios are against its_hub
in the same round. Writes ``benchmarks/results/peers_load/peers-load.md`` (+ ``.json``).

    .venv/bin/python -m benchmarks.peers_load [--questions 16] [--samples 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tqdm import tqdm

from benchmarks.out_paths import LOGS, results_of
from benchmarks.peers import ENGINE_FLAGS, MAX_TOKENS, its_hub
from benchmarks.servers import machine, thinkgate, vllm_server
from strategies.answers import equivalent, extract_answer
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("peers_load")
SIDES = ("deepconf", "thinkgate-sc", "its_hub")


@dataclass(slots=True)
class _Cell:
    side: str
    clients: int
    round: int
    wall_s: float = 0.0
    answered: int = 0
    right: int = 0
    completion: list[int] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    round_sizes: list[list[int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def qps(self) -> float:
        return self.answered / self.wall_s if self.wall_s else 0.0


def _request(side: str, samples: int) -> tuple[dict[str, str], dict[str, Any]]:
    if side == "its_hub":
        return {"X-ITS-Budget": str(samples)}, {}
    strategy = "deepconf" if side == "deepconf" else "self-consistency"
    return {"X-Strategy": strategy, "X-Budget-Samples": str(samples)}, {}


async def _run_cell(
    url: str, cell: _Cell, questions: Sequence[Question], samples: int, model: str
) -> None:
    headers, extra = _request(cell.side, samples)
    gate = asyncio.Semaphore(cell.clients)
    async with httpx.AsyncClient(base_url=url, timeout=900) as client:

        async def one(q: Question) -> None:
            async with gate:
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": q.prompt}],
                    "temperature": 1.0,
                    "max_tokens": MAX_TOKENS,
                    **extra,
                }
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/chat/completions", json=body, headers=headers)
                except httpx.HTTPError as exc:
                    cell.failures.append(f"{type(exc).__name__}: {exc}")
                    return
                cell.latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    cell.failures.append(f"HTTP {r.status_code}: {r.text[:120]}")
                    return
                data = r.json()
                cell.answered += 1
                content = str(
                    ((data.get("choices") or [{}])[0].get("message") or {}).get("content") or ""
                )
                answer = extract_answer(content)
                cell.right += answer is not None and equivalent(answer, str(q.answer))
                usage = data.get("usage") or {}
                cell.completion.append(int(usage.get("completion_tokens") or 0))
                cell.prompt.append(int(usage.get("prompt_tokens") or 0))
                tg = data.get("thinkgate") or {}
                if "round_sizes" in tg:
                    cell.round_sizes.append(list(tg["round_sizes"]))

        t0 = time.perf_counter()
        await asyncio.gather(*(one(q) for q in questions))
        cell.wall_s = time.perf_counter() - t0


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _report(cells: Sequence[_Cell], args: argparse.Namespace, minutes: float) -> str:
    lines = [
        "# DeepConf and self-consistency against its_hub under load (thinkgate bench peers --load)",
        "",
        f"{args.questions} held-out testbed questions (test split, 9-12 operations, seed "
        f"{args.seed}) per cell, N = {args.samples} samples, temperature 1, max_tokens "
        f"{MAX_TOKENS}; both stacks up at once (thinkgate in process; vLLM's own server with "
        f"its_hub's IaaS self-consistency in front, the same engine settings: "
        f"{' '.join(ENGINE_FLAGS)}, the model in the engine core on CPU); {args.rounds} "
        "rounds, every cell once per round in a "
        f"rotated order. Total {minutes:.1f} min.",
        "",
        "| clients | side | q/s (median, range) | / its_hub, same round (median, range) | "
        "accuracy % | completion tokens / question | prompt tokens / question | p50 s | "
        "p99 s | DeepConf round sizes (most common) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for clients in args.client_levels:
        hub = {c.round: c.qps for c in cells if c.side == "its_hub" and c.clients == clients}
        for side in SIDES:
            cs = [c for c in cells if c.side == side and c.clients == clients]
            if not cs:
                continue
            qps = [c.qps for c in cs]
            ratios = [c.qps / hub[c.round] for c in cs if hub.get(c.round)]
            answered = sum(c.answered for c in cs)
            right = sum(c.right for c in cs)
            comp = [x for c in cs for x in c.completion]
            prompt = [x for c in cs for x in c.prompt]
            lat = [x for c in cs for x in c.latencies]
            shapes = [tuple(s) for c in cs for s in c.round_sizes if s]
            common = max(set(shapes), key=shapes.count) if shapes else None
            online = (
                f", {len(shapes)} of {answered} with online rounds" if side == "deepconf" else ""
            )
            ratio = (
                f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})"
                if ratios and side != "its_hub"
                else ""
            )
            fails = sum(len(c.failures) for c in cs)
            lines.append(
                f"| {clients} | {side}{f' ({fails} failed)' if fails else ''} | "
                f"{statistics.median(qps):.3f} ({min(qps):.3f}-{max(qps):.3f}) | {ratio} | "
                f"{100 * right / max(answered, 1):.1f} | "
                f"{statistics.fmean(comp) if comp else 0:.0f} | "
                f"{statistics.fmean(prompt) if prompt else 0:.0f} | "
                f"{_pct(lat, 0.5):.2f} | {_pct(lat, 0.99):.2f} | "
                f"{list(common) if common else ''}{online} |"
            )
    lines += [
        "",
        "DeepConf draws each online round as large as the engine's free rows allow "
        "(`thinkgate` object `round_sizes`, `loads_seen`): one round of every trace left on "
        "an idle engine, rounds of one trace on a full one.",
        "",
        f"Machine: {machine()}. Command: `.venv/bin/python -m benchmarks.peers_load "
        f"{' '.join(args.argv)}`",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--clients", default="1,4,16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--peers-venv", default="/work/peers-venv")
    p.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.client_levels = [int(x) for x in args.clients.split(",") if x]
    if args.report_only:
        saved = json.loads((RESULTS / "peers-load.json").read_text())
        stored = [_Cell(**c) for c in saved["cells"]]
        args.argv = saved.get("argv", args.argv)
        text = _report(stored, args, float(saved.get("minutes", 0.0)))
        (RESULTS / "peers-load.md").write_text(text)
        print(text)
        return 0
    questions = make_questions("test", args.questions, seed=args.seed, min_ops=9, max_ops=12)
    model = str(model_path("base"))
    os.environ["THINKGATE_ENGINE_SPIN_MS"] = "1"  # both stacks' engines (benchmarks/overhead.py)
    LOGS.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    cells: list[_Cell] = []
    t0 = time.monotonic()
    flags = ("--reward-model", "none", "--prm-model", "none", "--max-n", str(args.samples))
    with (
        thinkgate(model, *flags, log=LOGS / "peers-load-thinkgate.log") as tg_url,
        vllm_server(model, *ENGINE_FLAGS, log=LOGS / "peers-load-vllm.log") as vllm_url,
    ):
        served = httpx.get(f"{vllm_url}/v1/models", timeout=10).json()["data"][0]["id"]
        tg_model = httpx.get(f"{tg_url}/v1/models", timeout=10).json()["data"][0]["id"]
        with its_hub(Path(args.peers_venv), vllm_url, served, args.samples) as hub_url:
            urls = {"deepconf": tg_url, "thinkgate-sc": tg_url, "its_hub": hub_url}
            models = {"deepconf": tg_model, "thinkgate-sc": tg_model, "its_hub": served}
            warm = make_questions("test", 2, seed=999, min_ops=9, max_ops=12)
            for side in SIDES:  # first requests pay one-off costs
                asyncio.run(
                    _run_cell(urls[side], _Cell(side, 2, -1), warm, args.samples, models[side])
                )
            plan = [(c, s) for c in args.client_levels for s in SIDES]
            bar = tqdm(total=args.rounds * len(plan), desc="peers --load")
            for rnd in range(args.rounds):
                shift = rnd % len(SIDES)
                for clients in args.client_levels:
                    for side in SIDES[shift:] + SIDES[:shift]:
                        cell = _Cell(side, clients, rnd)
                        asyncio.run(
                            _run_cell(urls[side], cell, questions, args.samples, models[side])
                        )
                        cells.append(cell)
                        bar.set_postfix(side=side, clients=clients, qps=f"{cell.qps:.2f}")
                        bar.update(1)
                        minutes = (time.monotonic() - t0) / 60
                        (RESULTS / "peers-load.json").write_text(
                            json.dumps(
                                {
                                    "argv": args.argv,
                                    "minutes": minutes,
                                    "cells": [asdict(c) for c in cells],
                                },
                                indent=1,
                            )
                        )
            bar.close()
    text = _report(cells, args, (time.monotonic() - t0) / 60)
    (RESULTS / "peers-load.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
