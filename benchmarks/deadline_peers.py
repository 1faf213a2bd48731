"""The peers under a deadline, for ``thinkgate bench budgets --peers-venv DIR``: neither
its_hub nor optillm takes a deadline, so each gets the client's: a timeout at the
deadline, a later answer counting as none (what a user with a deadline gets from them).

  its_hub-sc@8    its_hub's IaaS server, self-consistency, budget 8, on vLLM's server
  its_hub-pf@4    its_hub's particle filtering (library API, ``search_peers_its_hub.py``
                  in the peers' venv), 4 particles, the testbed PRM on vLLM's pooling
  optillm-mv@8    optillm's ``majority_voting`` plugin, ``k: 8``
  optillm-sc      optillm's ``self_consistency`` approach (5 samples, fixed in its code)

All on one vLLM server with thinkgate's engine settings (``benchmarks.peers``), the same
held-out questions and seeds as the thinkgate side. Between cells the engine is drained
(a peer may keep generating after its client left; within a cell that is the peer's own
cost, across cells it would be noise).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from benchmarks.budget_plans import Outcome, summary
from benchmarks.out_paths import LOGS
from benchmarks.peers import ENGINE_FLAGS, MAX_TOKENS, its_hub, optillm
from benchmarks.search_peers import DRIVER, MAX_STEPS, _questions_file, replica
from benchmarks.servers import ROOT, vllm_server
from strategies.answers import equivalent, extract_answer
from testbed import model_path
from testbed.task import Question

# name -> (server, request body fields, headers)
HTTP_PEERS: dict[str, tuple[str, dict[str, Any], dict[str, str]]] = {
    "its_hub-sc@8": ("its_hub", {}, {"X-ITS-Budget": "8"}),
    "optillm-mv@8": ("optillm", {"optillm_approach": "majority_voting", "k": 8}, {}),
    "optillm-sc": ("optillm", {"optillm_approach": "self_consistency"}, {}),
}
PF_PEER = "its_hub-pf@4"
PEERS: tuple[str, ...] = (*HTTP_PEERS, PF_PEER)


async def _ask(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    q: Question,
    body: dict[str, Any],
    headers: dict[str, str],
    deadline_s: float,
) -> Outcome:
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": q.prompt}],
        "temperature": 1.0,
        "max_tokens": MAX_TOKENS,
        **body,
    }
    t0 = time.perf_counter()
    try:
        r = await asyncio.wait_for(
            client.post(f"{url}/v1/chat/completions", json=payload, headers=headers),
            timeout=deadline_s,
        )
    except (TimeoutError, httpx.TimeoutException):
        return Outcome(False, False, 0, time.perf_counter() - t0, late=True)
    seconds = time.perf_counter() - t0
    if r.status_code != 200:
        return Outcome(False, False, 0, seconds, error=str(r.status_code))
    data = r.json()
    content = str(((data.get("choices") or [{}])[0].get("message") or {}).get("content") or "")
    answer = extract_answer(content)
    tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
    right = answer is not None and equivalent(answer, str(q.answer))
    return Outcome(right, answer is not None, tokens, seconds)


async def _cell(
    url: str,
    model: str,
    qs: Sequence[Question],
    body: dict[str, Any],
    headers: dict[str, str],
    deadline_s: float,
    clients: int,
) -> list[Outcome]:
    gate = asyncio.Semaphore(clients)
    async with httpx.AsyncClient(timeout=deadline_s * 3 + 30) as client:

        async def one(q: Question) -> Outcome:
            async with gate:
                return await _ask(client, url, model, q, body, headers, deadline_s)

        return list(await asyncio.gather(*(one(q) for q in qs)))


def _drain(vllm_url: str, timeout_s: float = 120.0) -> None:
    """Wait until vLLM runs and queues nothing (what a peer left generating)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        text = httpx.get(f"{vllm_url}/metrics", timeout=10).text
        busy = 0.0
        for line in text.splitlines():
            if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
                busy += float(line.rsplit(" ", 1)[1])
        if busy == 0:
            return
        time.sleep(0.5)


def _pf_cell(
    venv: Path, gen: str, prm: str, qs: Sequence[Question], deadline_s: float, clients: int
) -> list[Outcome]:
    work = LOGS / "deadline-peers"
    work.mkdir(parents=True, exist_ok=True)
    qfile = _questions_file(work / "questions.jsonl", qs)
    out = work / f"pf-{clients}-{deadline_s}.jsonl"
    cmd = [
        str(venv / "bin" / "python"),
        str(DRIVER),
        "--vllm-url",
        gen,
        "--prm-url",
        prm,
        "--algorithm",
        "particle-filtering",
        "--budget",
        "4",
        "--questions-file",
        str(qfile),
        "--concurrency",
        str(clients),
        "--out",
        str(out),
        "--max-steps",
        str(MAX_STEPS),
        "--temperature",
        "1.0",
        "--deadline-s",
        str(deadline_s),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"its_hub driver failed: {done.stderr[-1000:]}")
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return [
        Outcome(
            bool(r.get("correct")) and not r.get("late"),
            r.get("answer") is not None and not r.get("late"),
            int(r.get("completion_tokens") or 0),
            float(r.get("wall_s") or 0.0),
            late=bool(r.get("late")),
        )
        for r in rows
    ]


def measure(
    venv: Path,
    qs: Sequence[Question],
    deadlines: Sequence[float],
    clients: Sequence[int],
    bar: Any,
) -> dict[str, Any]:
    """``{"clients|deadline|peer": summary}``, and ``{"peer": reason}`` for a peer that
    could not run."""
    out: dict[str, Any] = {"cells": {}, "failed": {}}
    with ExitStack() as stack:
        gen = stack.enter_context(
            vllm_server(model_path("base"), *ENGINE_FLAGS, log=LOGS / "deadline-peers-vllm.log")
        )
        model = httpx.get(f"{gen}/v1/models", timeout=10).json()["data"][0]["id"]
        urls: dict[str, str] = {}
        starts = {
            "its_hub": partial(its_hub, venv, gen, model, 8),
            "optillm": partial(optillm, venv, gen, model),
        }
        for server, start in starts.items():
            try:
                urls[server] = stack.enter_context(start())
            except Exception as e:
                for name, (s, _, _) in HTTP_PEERS.items():
                    if s == server:
                        out["failed"][name] = f"could not start: {type(e).__name__}: {e}"
        prm: str | None = None
        try:
            prm = stack.enter_context(
                replica("--prm", "--prm-server", "vllm", log=LOGS / "deadline-peers-prm.log")
            )
        except Exception as e:
            out["failed"][PF_PEER] = f"could not start the PRM: {type(e).__name__}: {e}"
        for c in clients:
            for d in deadlines:
                for name in PEERS:
                    if name in out["failed"]:
                        bar.update(len(qs))
                        continue
                    _drain(gen)
                    try:
                        if name == PF_PEER:
                            assert prm is not None
                            got = _pf_cell(venv, gen, prm, qs, d, c)
                        else:
                            server, body, headers = HTTP_PEERS[name]
                            got = asyncio.run(_cell(urls[server], model, qs, body, headers, d, c))
                    except Exception as e:
                        out["failed"][name] = f"{type(e).__name__}: {e}"[:300]
                        bar.update(len(qs))
                        continue
                    out["cells"][f"{c}|{d}|{name}"] = summary(got, d)
                    bar.update(len(qs))
    return out


def rows(data: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, float]]]:
    for key, s in data.get("cells", {}).items():
        c, d, name = key.split("|")
        yield c, d, name, s
