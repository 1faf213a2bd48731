"""``thinkgate bench batches``: the Batch API across two gateways on one PostgreSQL, one of
them killed mid-batch, against one gateway on SQLite.

One vLLM server (``thinkgate replica``, the testbed base model) answers every gateway
(``--engine remote``), so that the gateways can die and start without an engine. A
throwaway PostgreSQL server holds the shared store. Through the OpenAI SDK:

1. ``sqlite``: one gateway on its own SQLite store runs a ``--lines``-line chat batch.
2. ``postgresql``: two gateways on PostgreSQL; the batch is created through one and
   polled through the other; it completes where it was claimed.
3. ``takeover``: the same, and the gateway holding the batch's lease is SIGKILLed once
   ``--kill-at`` of its lines are answered; the other takes over when the lease
   (``--lease-s``) lapses. Reported: the seconds from the kill to the survivor's first
   answer, every line answered exactly once (the output's custom ids against the input's,
   and the store's count of answers per gateway), the batch's status.

Throughput (lines per second, creation to completion) as a ratio of ``postgresql`` to
``sqlite``, and the store's own cost per line: the statements a line costs (claiming it,
recording its answer, writing the output) timed alone on each database.

Writes ``benchmarks/results/batches/batches.{md,json}``.

    .venv/bin/python -m benchmarks.batches [--lines 200] [--kill-at 0.4]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson

from benchmarks.out_paths import LOGS, results_of
from benchmarks.postgres import postgres_server
from benchmarks.servers import ServerUrl, free_port, machine, serve
from core.base import JSON
from server.batches.records import BatchRecord, Line, new_id
from server.batches.store import BatchStore
from testbed.task import make_questions

RESULTS = results_of("batches")
MODEL = "testbed-base"


@contextmanager
def _replica() -> Iterator[ServerUrl]:
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "replica", "--port", str(port)]
    cmd += ["--served-model-name", MODEL, "--max-model-len", "512"]  # the testbed's context
    with serve(cmd, ready_path="/health", log=LOGS / "batches-replica.log", port=port) as url:
        yield url


@contextmanager
def _gateway(tag: str, upstream: str, *flags: str) -> Iterator[tuple[ServerUrl, Path]]:
    port = free_port()
    state = tempfile.mkdtemp(prefix=f"thinkgate-bench-batches-{tag}-")
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]
    cmd += ["--engine", "remote", "--vllm-urls", upstream, "--served-model-name", MODEL]
    cmd += ["--max-model-len", "512"]
    cmd += ["--reward-model", "none", "--prm-model", "none", "--state-dir", state, *flags]
    log = LOGS / f"batches-gateway-{tag}.log"
    with serve(cmd, ready_path="/ready", log=log, port=port) as url:
        yield url, log


def _owner_of(log: Path) -> str:
    """The batch runner's owner id a gateway logged at start-up."""
    found = re.search(r'"owner": "(gw-[0-9a-f]+)"', log.read_text(errors="replace"))
    if found is None:
        raise RuntimeError(f"no batch owner in {log}")
    return found.group(1)


def _input_file(lines: int, max_tokens: int) -> bytes:
    questions = make_questions("test", lines, seed=11, min_ops=3, max_ops=5)
    return b"\n".join(
        orjson.dumps(
            {
                "custom_id": f"q{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": q.prompt}],
                    "max_tokens": max_tokens,
                    "temperature": 1.0,
                    "seed": i,
                },
            }
        )
        for i, q in enumerate(questions)
    )


def _client(url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=2, timeout=60)


def _run_batch(
    submit: ServerUrl,
    poll: ServerUrl,
    content: bytes,
    *,
    kill_at: float | None = None,
    owners: dict[str, ServerUrl] | None = None,
    store_url: str | None = None,
) -> dict[str, Any]:
    """Create a batch through ``submit``, poll it through ``poll`` until it ends; with
    ``kill_at``, SIGKILL the gateway holding its lease (``owners``: runner id ->
    gateway) once that share of the lines is answered, and poll through the other."""
    from tqdm import tqdm

    upload = _client(submit).files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    started = time.perf_counter()
    batch = _client(submit).batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    total = content.count(b"\n") + 1
    out: dict[str, Any] = {"lines": total}
    killed_at: float | None = None
    before_kill: dict[str, int] = {}
    bar = tqdm(total=total, desc="lines", unit="line", file=sys.stderr, leave=False)
    while True:
        b = _client(poll).batches.retrieve(batch.id)
        answered = b.request_counts.completed + b.request_counts.failed
        bar.n = answered
        bar.refresh()
        if kill_at is not None and killed_at is None and answered >= kill_at * total:
            assert owners is not None and store_url is not None
            holder = owners[_lease_owner(store_url, batch.id)]
            before_kill = asyncio.run(_answered_by(store_url, batch.id))
            os.killpg(holder.pid, signal.SIGKILL)
            killed_at = time.perf_counter()
            out["killed"] = "the creating gateway" if holder is submit else "the other gateway"
            poll = next(g for g in owners.values() if g is not holder)
        if killed_at is not None and "first_survivor_answer_s" not in out:
            by = asyncio.run(_answered_by(store_url, batch.id))
            if any(n > before_kill.get(o, 0) for o, n in by.items()):
                out["first_survivor_answer_s"] = time.perf_counter() - killed_at
        if b.status in ("completed", "failed", "cancelled", "expired"):
            break
        time.sleep(0.1)
    bar.close()
    out["seconds"] = time.perf_counter() - started
    out["status"] = b.status
    out["lines_per_s"] = total / out["seconds"]
    c = _client(poll)
    output = c.files.content(b.output_file_id).content.splitlines() if b.output_file_id else []
    errors = c.files.content(b.error_file_id).content.splitlines() if b.error_file_id else []
    ids = [orjson.loads(x)["custom_id"] for x in [*output, *errors]]
    out["answered"] = len(ids)
    out["exactly_once"] = sorted(ids) == sorted(f"q{i}" for i in range(total))
    out["failed"] = len(errors)
    if store_url is not None:
        out["answered_by"] = asyncio.run(_answered_by(store_url, batch.id))
    return out


def _lease_owner(store_url: str, batch_id: str) -> str:
    import psycopg

    with psycopg.connect(store_url) as conn:
        row = conn.execute(
            "SELECT lease_owner FROM tg_batches WHERE id = %s", (batch_id,)
        ).fetchone()
    if row is None or row[0] is None:
        raise RuntimeError(f"batch {batch_id} has no lease holder")
    return str(row[0])


async def _answered_by(target: str | None, batch_id: str) -> dict[str, int]:
    if target is None:
        return {}
    store = BatchStore(target)
    try:
        return await store.answered_by(batch_id)
    finally:
        await store.aclose()


async def _store_cost(target: str, lines: int) -> dict[str, float]:
    """The store's statements per line, alone: create (the line's row), claim the batch,
    take the pending lines, record each answer, read the answers back."""
    store = BatchStore(target)
    try:
        record = BatchRecord(
            id=new_id("batch_"),
            owner="bench",
            endpoint="/v1/chat/completions",
            input_file_id="file-bench",
            status="in_progress",
            created_at=int(time.time()),
            expires_at=int(time.time()) + 86400,
            times={},
        )
        body: dict[str, JSON] = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "x" * 64}],
        }
        rows = [Line(index=i, custom_id=f"q{i}", body=body) for i in range(lines)]
        t0 = time.perf_counter()
        await store.create_batch(record, rows)
        await store.claim("bench", lease_s=30, limit=1)
        pending = await store.pending(record.id, lines)
        t1 = time.perf_counter()
        answer: dict[str, JSON] = {
            "custom_id": "q",
            "response": {"status_code": 200, "body": {"x": "y" * 512}},
        }
        for line in pending:
            await store.record(record.id, line.index, answer, ok=True, owner="bench")
        t2 = time.perf_counter()
        await store.answers(record.id)
        t3 = time.perf_counter()
        return {
            "create_ms_per_line": 1000 * (t1 - t0) / lines,
            "record_ms_per_line": 1000 * (t2 - t1) / lines,
            "read_ms_per_line": 1000 * (t3 - t2) / lines,
            "total_ms_per_line": 1000 * (t3 - t0) / lines,
        }
    finally:
        await store.aclose()


def _report(results: dict[str, Any], meta: dict[str, Any]) -> str:
    s, p, k = results["sqlite"], results["postgresql"], results["takeover"]
    lines = [
        "# Batches: two gateways on one PostgreSQL, one killed mid-batch",
        "",
        f"Machine: {meta['machine']}. Command: `{meta['command']}`.",
        f"One vLLM server (testbed base) behind every gateway (`--engine remote`); "
        f"{meta['lines']} chat lines (max_tokens {meta['max_tokens']}, temperature 1), "
        f"`--batch-concurrency` 8, `--batch-lease-s` {meta['lease_s']}.",
        "",
        "| run | status | lines answered | exactly once | seconds | lines/s | vs sqlite |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in (
        ("sqlite, one gateway", s),
        ("postgresql, two gateways", p),
        ("postgresql, holder killed", k),
    ):
        lines.append(
            f"| {name} | {r['status']} | {r['answered']} of {r['lines']} | "
            f"{'yes' if r['exactly_once'] else 'NO'} | {r['seconds']:.1f} | "
            f"{r['lines_per_s']:.2f} | {r['lines_per_s'] / s['lines_per_s']:.2f}x |"
        )
    lines += [
        "",
        f"- Takeover: the lease holder was SIGKILLed at {meta['kill_at']:.0%} of the lines; "
        f"the survivor's first answer came {k.get('first_survivor_answer_s', float('nan')):.1f} s "
        f"later (lease {meta['lease_s']} s, claims every third of it). Answers per gateway: "
        f"{k.get('answered_by')}.",
        "- The store's own cost per line (its statements alone: the line's row, the claim, "
        "the pending read, the answer, the output read):",
        "",
        "| store | create ms | record ms | read ms | total ms per line |",
        "|---|---|---|---|---|",
    ]
    for name, c in results["store_cost"].items():
        lines.append(
            f"| {name} | {c['create_ms_per_line']:.3f} | {c['record_ms_per_line']:.3f} | "
            f"{c['read_ms_per_line']:.3f} | {c['total_ms_per_line']:.3f} |"
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench batches", description=__doc__)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--kill-at", type=float, default=0.4)
    parser.add_argument("--lease-s", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "batches")
    args = parser.parse_args(argv)
    content = _input_file(args.lines, args.max_tokens)
    meta = {
        "machine": machine(),
        "command": " ".join(["python -m benchmarks.batches", *(argv or sys.argv[1:])]),
        "lines": args.lines,
        "max_tokens": args.max_tokens,
        "kill_at": args.kill_at,
        "lease_s": args.lease_s,
    }
    results: dict[str, Any] = {}
    lease = ("--batch-lease-s", str(args.lease_s))
    with ExitStack() as stack:
        upstream = stack.enter_context(_replica())
        pg = stack.enter_context(postgres_server())
        with _gateway("sqlite", upstream, *lease) as (g0, _):
            results["sqlite"] = _run_batch(g0, g0, content)
        with tempfile.TemporaryDirectory() as tmp:
            results["store_cost"] = {
                "sqlite": asyncio.run(_store_cost(str(Path(tmp) / "cost.sqlite3"), 1000)),
                "postgresql": asyncio.run(_store_cost(pg, 1000)),
            }
        shared = ("--batch-store", pg, *lease, "--log-level", "info")
        with (
            _gateway("pg-a", upstream, *shared) as (a, _),
            _gateway("pg-b", upstream, *shared) as (b, _),
        ):
            results["postgresql"] = _run_batch(a, b, content, store_url=pg)
        with (
            _gateway("pg-c", upstream, *shared) as (c, c_log),
            _gateway("pg-d", upstream, *shared) as (d, d_log),
        ):
            owners = {_owner_of(c_log): c, _owner_of(d_log): d}
            results["takeover"] = _run_batch(
                c, d, content, kill_at=args.kill_at, owners=owners, store_url=pg
            )
    text = _report(results, meta)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.md").write_text(text)
    Path(f"{args.out}.json").write_text(json.dumps({"meta": meta, **results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
