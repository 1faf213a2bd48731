"""``thinkgate bench search-peers``: thinkgate's PRM searches against its_hub's, side by
side on the same vLLM engine and the same PRM, interleaved.

One vLLM server generates for both (``thinkgate replica``: vLLM's own OpenAI server with
the token-in/token-out routes; the testbed's engine settings; no reasoning parser, since
its_hub reads the thinking from the chat ``content``). The testbed PRM is served
the way each side deploys it: thinkgate's PRM server for thinkgate (``thinkgate replica
--prm``: vLLM's pooling engine behind vLLM's ``/pooling`` wire, with the prefix cache),
vLLM's own server for its_hub (``thinkgate replica --prm --prm-server vllm``: STEP
pooling, no cache: its_hub's own PRM class runs vLLM the same way in its process).
``its_hub-cached-prm`` (not a default peer) is its_hub on thinkgate's PRM server: what
of the lead the PRM's cache makes.

  thinkgate  ``thinkgate serve --engine remote --vllm-urls <replica> --prm-url <prm>``:
             a step of all paths is one round of token-id requests (``n`` = candidates
             per distinct path, the prefix in vLLM's cache), the PRM one batched call
  thinkgate-speculate  the same, particle filtering with ``speculate: true`` (each next
             step drawn while the PRM scores the current one; not a default peer)
  thinkgate-local  ``thinkgate serve`` as deployed by default: the same engine settings
             and the same PRM weights, both in its own process (no HTTP per step)
  its_hub    its_hub 1.2's library (``ParticleFiltering`` / ``BeamSearch``; its IaaS
             server runs only self-consistency) driven by
             ``benchmarks/search_peers_its_hub.py`` in its own virtual environment
             (``--peers-venv``): one chat call per path per step, the whole text re-sent;
             its PRM interface adapted to the same ``/pooling`` server (its own PRM class
             loads Qwen2.5-Math-PRM on a GPU in its process)

Equal N: particle filtering with N particles on both; beam search with N beams and M
candidates each on thinkgate, its_hub's ``BeamSearch`` with budget N x M and width N
(it keeps ``width`` beams and expands each ``budget / width`` times: the same search).
Both use temperature 1, a newline as the step delimiter, 40 steps at most, the last
step's reward as a path's score and the best path's answer.

Rounds are interleaved (each round starts with the next side), each side answering
the same ``--questions`` with ``--concurrency`` in flight; per cell the median questions
per second over rounds, its range, accuracy, the prompt and completion tokens each bills
per question, and what vLLM itself counted (its ``/metrics``). Writes
``benchmarks/results/search_peers/search-peers.{md,json,png}``.

    .venv/bin/python -m benchmarks.search_peers --peers-venv /work/peers-venv
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.out_paths import LOGS, beside, results_of
from benchmarks.servers import ROOT, ServerUrl, free_port, machine, serve, thinkgate, tree_cpu_s
from strategies.answers import equivalent
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("search_peers")
DRIVER = ROOT / "benchmarks" / "search_peers_its_hub.py"
MAX_STEPS = 40
GEN_COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:prefix_cache_hits_total",
)


@dataclass(frozen=True, slots=True)
class _Side:
    """One side's run of the question set in one round."""

    peer: str
    algorithm: str
    n: int
    round: int
    qps: float
    accuracy: float
    failed: int
    prompt_tokens: float  # billed, per question
    completion_tokens: float
    vllm_prompt_tokens: float  # counted by vLLM, per question
    vllm_generated_tokens: float
    vllm_requests: float
    vllm_cached_tokens: float = 0.0  # prompt tokens vLLM read from its prefix cache
    prm_tokens: float = 0.0  # tokens the PRM's engine computed, per question (its server's count)
    # CPU seconds per question: the generator replica, the side's PRM server, and the
    # side's own process (thinkgate's gateway, with its engines when in process; its_hub's
    # driver process, its library included).
    cpu_generator: float = 0.0
    cpu_prm: float = 0.0
    cpu_front: float = 0.0
    # Where a thinkgate question's time went, per question, from its responses' own
    # `thinkgate` object (NaN for its_hub, which reports none): the request's latency, its
    # search steps, and its waits on the engine and on the PRM.
    latency_s: float = math.nan
    steps: float = math.nan
    engine_wait_s: float = math.nan
    prm_wait_s: float = math.nan


@contextmanager
def replica(*flags: str, log: Path) -> Iterator[ServerUrl]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "server.cli",
        "replica",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *flags,
    ]
    with serve(cmd, ready_path="/health", log=log, port=port) as url:
        yield url


# What each PRM server says its engine computed: vLLM's server every token asked for (its
# /pooling reads no cache), thinkgate's the tokens past its cache.
PRM_COUNTERS = ("vllm:prompt_tokens_total", "thinkgate_prm_scored_tokens_total")


def _counters(url: str, names: Sequence[str] = GEN_COUNTERS) -> dict[str, float]:
    out = dict.fromkeys(names, 0.0)
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


async def _thinkgate_side(
    url: str,
    algorithm: str,
    n: int,
    m: int,
    questions: Sequence[Question],
    concurrency: int,
    *,
    speculate: bool = False,
) -> tuple[float, list[dict[str, Any]]]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=1800)
    model = (await client.models.list()).data[0].id
    gate = asyncio.Semaphore(concurrency)
    body: dict[str, Any] = {"max_steps": MAX_STEPS}
    if algorithm == "beam-search":
        body["expansions"] = m
    if speculate and algorithm == "particle-filtering":
        body["speculate"] = True
    headers = {"X-Strategy": algorithm, "X-Budget-Samples": str(n)}

    async def one(q: Question) -> dict[str, Any]:
        async with gate:
            t0 = time.perf_counter()
            try:
                r = await client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": q.prompt}],
                    temperature=1.0,
                    extra_headers=headers,
                    extra_body=body,
                )
            except openai.APIError as exc:
                return {
                    "correct": False,
                    "error": str(exc),
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                }
            latency = time.perf_counter() - t0
        answer = ((r.choices[0].model_extra or {}).get("thinkgate") or {}).get("answer")
        info = (r.model_extra or {}).get("thinkgate") or {}
        usage = r.usage
        return {
            "correct": answer is not None and equivalent(str(answer), str(q.answer)),
            "prompt_tokens": usage.prompt_tokens if usage else 0,
            "completion_tokens": usage.completion_tokens if usage else 0,
            "latency_s": latency,
            "steps": info.get("steps"),
            "engine_wait_s": info.get("engine_seconds"),
            "prm_wait_s": info.get("prm_seconds"),
        }

    t0 = time.perf_counter()
    rows = list(await asyncio.gather(*(one(q) for q in questions)))
    wall = time.perf_counter() - t0
    await client.close()
    return wall, rows


def _its_hub_side(
    args: argparse.Namespace,
    gen: str,
    prm: str,
    algorithm: str,
    n: int,
    m: int,
    qfile: Path,
    out: Path,
) -> dict[str, Any]:
    cmd = [
        str(Path(args.peers_venv) / "bin" / "python"),
        str(DRIVER),
        "--vllm-url",
        gen,
        "--prm-url",
        prm,
        "--algorithm",
        algorithm,
        "--questions-file",
        str(qfile),
        "--concurrency",
        str(args.concurrency),
        "--out",
        str(out),
        "--max-steps",
        str(MAX_STEPS),
        "--temperature",
        "1.0",
    ]
    if algorithm == "beam-search":
        cmd += ["--budget", str(n * m), "--beam-width", str(n)]
    else:
        cmd += ["--budget", str(n)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"its_hub driver failed: {done.stderr[-2000:]}")
    summary: dict[str, Any] = json.loads(Path(f"{out}.summary.json").read_text())
    return summary


def side_of(
    peer: str,
    algorithm: str,
    n: int,
    rnd: int,
    wall: float,
    rows: Sequence[dict[str, Any]],
    before: dict[str, float],
    after: dict[str, float],
    prm_tokens: float,
    cpu: Mapping[str, float],
) -> _Side:
    q = len(rows)
    d = {k: after[k] - before[k] for k in GEN_COUNTERS}
    return _Side(
        peer=peer,
        algorithm=algorithm,
        n=n,
        round=rnd,
        qps=q / wall if wall else 0.0,
        accuracy=100.0 * sum(bool(r["correct"]) for r in rows) / q,
        failed=sum(1 for r in rows if "error" in r),
        prompt_tokens=statistics.fmean(r["prompt_tokens"] for r in rows),
        completion_tokens=statistics.fmean(r["completion_tokens"] for r in rows),
        vllm_prompt_tokens=d["vllm:prompt_tokens_total"] / q,
        vllm_generated_tokens=d["vllm:generation_tokens_total"] / q,
        vllm_requests=d["vllm:request_success_total"] / q,
        vllm_cached_tokens=d["vllm:prefix_cache_hits_total"] / q,
        prm_tokens=prm_tokens / q,
        cpu_generator=cpu["generator"] / q,
        cpu_prm=cpu["prm"] / q,
        cpu_front=cpu["front"] / q,
        **{k: _reported_mean(rows, k) for k in WAITS},
    )


# What a thinkgate response reports of its own time (``side_of`` averages them).
WAITS = ("latency_s", "steps", "engine_wait_s", "prm_wait_s")


def _reported_mean(rows: Sequence[dict[str, Any]], key: str) -> float:
    """The mean over the questions that report ``key`` (NaN when none does: its_hub)."""
    got = [float(r[key]) for r in rows if r.get(key) is not None]
    return statistics.fmean(got) if got else math.nan


def _questions_file(path: Path, questions: Sequence[Question]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": i, "prompt": q.prompt, "answer": q.answer}) + "\n"
            for i, q in enumerate(questions)
        )
    )
    return path


def run(args: argparse.Namespace) -> list[_Side]:
    from tqdm import tqdm

    questions = make_questions(
        "test", args.questions, seed=args.seed, min_ops=args.min_ops, max_ops=args.max_ops
    )
    work = LOGS / "search-peers"
    work.mkdir(parents=True, exist_ok=True)
    qfile = _questions_file(work / "questions.jsonl", questions)
    warm_file = _questions_file(work / "warmup.jsonl", questions[: args.warmup])
    cells = [(a, int(n)) for a in args.algorithms.split(",") for n in args.ns.split(",")]
    peers = [p for p in args.peers.split(",") if p]
    sides: list[_Side] = []
    with ExitStack() as stack:
        # No reasoning parser on the shared generator (``thinkgate replica`` names one for
        # its default model, for JSON answers' grammar): with it vLLM's chat route moves
        # the thinking into ``reasoning``, and its_hub, which reads ``content`` and sends
        # it back as the next prompt, grows empty steps and never answers (0% correct).
        # thinkgate's token-id route does not read it.
        gen = stack.enter_context(
            replica(
                "--reasoning-parser=",
                *args.generator_flags.split(),
                log=LOGS / "search-peers-replica.log",
            )
        )
        # Both sides' PRM servers get the same engine flags (``--prm-flags``).
        prm_flags = args.prm_flags.split()
        prm = stack.enter_context(replica("--prm", *prm_flags, log=LOGS / "search-peers-prm.log"))
        prm_vllm = stack.enter_context(
            replica(
                "--prm",
                "--prm-server",
                "vllm",
                *prm_flags,
                log=LOGS / "search-peers-prm-vllm.log",
            )
        )
        prm_of = {"its_hub": prm_vllm, "its_hub-cached-prm": prm}
        gateways: dict[str, ServerUrl] = {}
        remote = ("--engine", "remote", "--vllm-urls", gen, "--prm-url", prm)
        # thinkgate-per-path: the same, a step's paths sent as one call each (what the
        # joint completions call replaced), for the A/B in one run.
        for peer, extra in (
            ("thinkgate", ()),
            ("thinkgate-per-path", ("--no-remote-joint-calls",)),
            ("thinkgate-speculate", ()),
        ):
            if peer in peers:
                gateways[peer] = stack.enter_context(
                    thinkgate(
                        model_path("base"), *remote, *extra, log=LOGS / f"search-peers-{peer}.log"
                    )
                )
        if "thinkgate-local" in peers:
            # thinkgate's default deployment: the engine and the PRM in its own process.
            gateways["thinkgate-local"] = stack.enter_context(
                thinkgate(model_path("base"), log=LOGS / "search-peers-thinkgate-local.log")
            )
        # A warm-up round first, not counted: without it every run's first round was its
        # slowest (servers that had answered nothing yet), whichever side went first.
        rounds = [-1] * (args.warmup > 0) + list(range(args.rounds))
        bar = tqdm(total=len(cells) * len(rounds) * len(peers), desc="search peers")
        for rnd in rounds:
            for algorithm, n in cells:
                # Every round starts with another side, so drift in the machine's load
                # does not always fall on the same one.
                order = peers[rnd % len(peers) :] + peers[: rnd % len(peers)]
                for peer in order:
                    asked, asked_file = (
                        (questions[: args.warmup], warm_file) if rnd < 0 else (questions, qfile)
                    )
                    before = _counters(gen)
                    scorer = prm_of.get(peer, prm)
                    prm_before = _counters(scorer, PRM_COUNTERS)
                    cpu_before = _cpu(gen, scorer, gateways.get(peer))
                    if peer in gateways:
                        wall, rows = asyncio.run(
                            _thinkgate_side(
                                gateways[peer],
                                algorithm,
                                n,
                                args.expansions,
                                asked,
                                args.concurrency,
                                speculate=peer == "thinkgate-speculate",
                            )
                        )
                    else:
                        out = work / f"its_hub-{algorithm}-{n}-r{rnd}.jsonl"
                        summary = _its_hub_side(
                            args,
                            gen,
                            scorer,
                            algorithm,
                            n,
                            args.expansions,
                            asked_file,
                            out,
                        )
                        wall = summary["wall_s"]
                        rows = [json.loads(x) for x in out.read_text().splitlines() if x]
                    cpu_after = _cpu(gen, scorer, gateways.get(peer))
                    cpu = {k: cpu_after[k] - cpu_before[k] for k in cpu_after}
                    after = _counters(gen)
                    prm_after = _counters(scorer, PRM_COUNTERS)
                    computed = sum(prm_after[k] - prm_before[k] for k in PRM_COUNTERS)
                    if peer == "thinkgate-local":
                        computed = float("nan")  # in its own process: not counted here
                    bar.update(1)
                    if rnd < 0:
                        continue
                    sides.append(
                        side_of(peer, algorithm, n, rnd, wall, rows, before, after, computed, cpu)
                    )
                    bar.set_postfix(peer=peer, alg=algorithm, n=n, qps=f"{sides[-1].qps:.2f}")
                    beside(Path(args.out), ".json").write_text(
                        json.dumps([asdict(s) for s in sides], indent=1)
                    )
        bar.close()
    return sides


def _cpu(gen: ServerUrl, prm: ServerUrl, gateway: ServerUrl | None) -> dict[str, float]:
    """CPU seconds so far of the generator's and the PRM's servers, and of the side's own
    process: the gateway's tree, or (its_hub) the driver subprocesses this process has
    waited for."""
    if gateway is not None:
        front = tree_cpu_s(gateway.pid)
    else:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        front = children.ru_utime + children.ru_stime
    return {"generator": tree_cpu_s(gen.pid), "prm": tree_cpu_s(prm.pid), "front": front}


def _med(xs: Sequence[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})" if xs else "-"


def _mean(xs: Sequence[_Side], field: str) -> float:
    return statistics.fmean(getattr(s, field) for s in xs) if xs else 0.0


def _engine_flags(args: argparse.Namespace) -> str:
    """How the servers' engines ran: eager (``thinkgate replica``'s CPU default) unless
    the flags say otherwise."""
    extra = [
        f"generator `{args.generator_flags}`" if args.generator_flags else "",
        f"both PRM servers `{args.prm_flags}`" if args.prm_flags else "",
    ]
    told = "; ".join(x for x in extra if x)
    return f"Engine flags added: {told}." if told else "Engines eager (the CPU default)."


def _report(sides: Sequence[_Side], args: argparse.Namespace, minutes: float) -> str:
    sha = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    cells = list(dict.fromkeys((s.algorithm, s.n) for s in sides))
    lines = [
        "# PRM search: thinkgate against its_hub on the same engine and PRM (thinkgate bench search-peers)",  # noqa: E501
        "",
        f"{args.questions} held-out testbed questions (test split, {args.min_ops}-{args.max_ops} "
        f"operations, seed {args.seed}), {args.concurrency} questions in flight per side, "
        f"{args.rounds} interleaved rounds per cell (each starts with the next side), "
        f"after a warm-up of {args.warmup} questions per side and cell, not counted. "
        "`thinkgate` and `its_hub` use one `thinkgate replica` (vLLM's own server, float32, "
        "512-token context, the model in the engine core on CPU, no reasoning parser: "
        "its_hub reads the "
        "thinking from `content`); the testbed PRM as each deploys it: "
        "`thinkgate` on `thinkgate replica --prm` (thinkgate's PRM server: vLLM's pooling "
        "engine, `/pooling` wire, prefix cache), `its_hub` on `thinkgate replica --prm "
        "--prm-server vllm` (vLLM's own server: STEP pooling, no cache)"
        + (
            ", `its_hub-cached-prm` its_hub on thinkgate's PRM server"
            if any(s.peer == "its_hub-cached-prm" for s in sides)
            else ""
        )
        + (
            ", `thinkgate-speculate` thinkgate with particle filtering's `speculate: true` "
            "(each next step drawn while the PRM scores the current one)"
            if any(s.peer == "thinkgate-speculate" for s in sides)
            else ""
        )
        + (
            ", `thinkgate-per-path` thinkgate with `--no-remote-joint-calls` (each path's "
            "step its own call, over the token-in route)"
            if any(s.peer == "thinkgate-per-path" for s in sides)
            else ""
        )
        + "; `thinkgate-local` is `thinkgate serve` as deployed by "
        "default, the same engine settings and PRM weights in its own process. "
        f"Beam search: thinkgate N beams x {args.expansions} candidates, "
        f"its_hub budget N x {args.expansions} and width N. {_engine_flags(args)} "
        f"Total {minutes:.1f} min.",
        "",
        "| algorithm | N | side | q/s (median of rounds, range) | / its_hub, same round (median, range) | accuracy % | prompt tokens billed per question | completion tokens billed | vLLM server counted per question: requests / prompt (of which from its prefix cache) / generated | PRM tokens computed per question | CPU s per question: generator / PRM / own process (sum) |",  # noqa: E501
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    peers = list(dict.fromkeys(s.peer for s in sides))
    for algorithm, n in cells:
        ih = [s for s in sides if (s.algorithm, s.n, s.peer) == (algorithm, n, "its_hub")]
        for peer in peers:
            mine = [s for s in sides if (s.algorithm, s.n, s.peer) == (algorithm, n, peer)]
            ratios = [a.qps / b.qps for a in mine for b in ih if a.round == b.round and b.qps]
            counted = (
                "in process"
                if peer == "thinkgate-local"
                else f"{_mean(mine, 'vllm_requests'):.0f} / {_mean(mine, 'vllm_prompt_tokens'):.0f}"
                f" ({_mean(mine, 'vllm_cached_tokens'):.0f})"
                f" / {_mean(mine, 'vllm_generated_tokens'):.0f}"
            )
            ratio = "" if peer == "its_hub" else f"**{_med(ratios)}**"
            prm_work = (
                "in process" if peer == "thinkgate-local" else f"{_mean(mine, 'prm_tokens'):.0f}"
            )
            cpu = [_mean(mine, k) for k in ("cpu_generator", "cpu_prm", "cpu_front")]
            spent = (
                f"in process: {cpu[2]:.2f}"
                if peer == "thinkgate-local"
                else f"{cpu[0]:.2f} / {cpu[1]:.2f} / {cpu[2]:.2f} ({sum(cpu):.2f})"
            )
            lines.append(
                f"| {algorithm} | {n} | {peer} | {_med([s.qps for s in mine])} | {ratio} | "
                f"{_mean(mine, 'accuracy'):.1f} | {_mean(mine, 'prompt_tokens'):.0f} | "
                f"{_mean(mine, 'completion_tokens'):.0f} | {counted} | {prm_work} | {spent} |"
            )
    lines += waits_table(sides, cells, peers)
    lines += [
        "",
        "Billed tokens are what each returns to its client: thinkgate's `usage` (the prompt "
        "once; every generated token, pruned candidates included), its_hub's per call "
        "`usage` summed by the driver (its_hub itself reports none for these algorithms: "
        "each step's call bills the whole text so far as prompt). vLLM's counts come from "
        "its `/metrics` around each side's run. CPU seconds are read around each side's "
        "run from the processes' own counters (each server with its engine processes; "
        "its_hub's driver process, its library included; the bench's thin HTTP client for "
        "thinkgate is not counted): with the box saturated, the sums bound the ratio of "
        "questions per second.",
        "",
        f"![questions per second]({beside(Path(args.out), '.png').name})",
        "",
        f"Machine: {machine()}; both sides share its 2 cores with the two vLLM servers, so "
        f"only same-round ratios are compared. Commit {sha}.",
        "",
        "Command: `.venv/bin/python -m benchmarks.search_peers " + " ".join(args.argv) + "`",
        "",
    ]
    return "\n".join(lines)


def waits_table(
    sides: Sequence[_Side], cells: Sequence[tuple[str, int]], peers: Sequence[str]
) -> list[str]:
    """Where a thinkgate question's time went: its latency, split into the waits its
    responses report (none for its_hub)."""
    rows: list[str] = []
    for algorithm, n in cells:
        for peer in peers:
            mine = [
                s
                for s in sides
                if (s.algorithm, s.n, s.peer) == (algorithm, n, peer)
                and not math.isnan(s.latency_s)
            ]
            if not mine:
                continue
            latency, steps = _mean(mine, "latency_s"), _mean(mine, "steps")
            engine, prm = _mean(mine, "engine_wait_s"), _mean(mine, "prm_wait_s")
            per_step = 1000.0 / steps if steps else math.nan
            rows.append(
                f"| {algorithm} | {n} | {peer} | {latency:.2f} | {steps:.1f} | "
                f"{engine:.2f} ({100 * engine / latency:.0f}%, {engine * per_step:.0f} ms) | "
                f"{prm:.2f} ({100 * prm / latency:.0f}%, {prm * per_step:.0f} ms) | "
                f"{latency - engine - prm:.2f} |"
            )
    if not rows:
        return []
    return [
        "",
        "Where a thinkgate question's time went (means per question over the rounds; "
        "latency from the bench's client, the waits from each response's `thinkgate` "
        "object: `steps`, `engine_seconds`, answers included, and `prm_seconds`; the rest "
        "is the gateway's own work and the HTTP between them):",
        "",
        "| algorithm | N | side | latency s | steps | waiting on the engine s (share, per step) "
        "| waiting on the PRM s (share, per step) | rest s |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ]


def _plot(sides: Sequence[_Side], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(dict.fromkeys((s.algorithm, s.n) for s in sides))
    fig, ax = plt.subplots(figsize=(7, 4))
    x = range(len(cells))
    peers = list(dict.fromkeys(s.peer for s in sides))
    width = 0.8 / len(peers)
    for k, peer in enumerate(peers):
        med = [
            statistics.median(
                [s.qps for s in sides if (s.algorithm, s.n, s.peer) == (*c, peer)] or [0]
            )
            for c in cells
        ]
        ax.bar([i + width * k - 0.4 + width / 2 for i in x], med, width=width, label=peer)
    ax.set_xticks(list(x), [f"{a}\nN={n}" for a, n in cells], fontsize=8)
    ax.set_ylabel("questions per second (median of rounds)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="thinkgate bench search-peers")
    p.add_argument("--peers-venv", default="/work/peers-venv")
    p.add_argument("--questions", type=int, default=16)
    p.add_argument("--min-ops", type=int, default=9)
    p.add_argument("--max-ops", type=int, default=12)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--algorithms", default="particle-filtering,beam-search")
    p.add_argument(
        "--peers",
        default="thinkgate,thinkgate-local,its_hub",
        help="thinkgate: in front of the same vLLM servers; thinkgate-per-path: the same "
        "with --no-remote-joint-calls (a call per path per step); thinkgate-local: its "
        "default deployment (engine and PRM in process); thinkgate-speculate: thinkgate "
        "with particle filtering's speculate; its_hub (on vLLM's PRM server); "
        "its_hub-cached-prm (its_hub on thinkgate's PRM server)",
    )
    p.add_argument("--ns", default="4,8")
    p.add_argument("--expansions", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--warmup",
        type=int,
        default=4,
        help="questions each side answers per cell before the measured rounds (not counted; "
        "0: none)",
    )
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--out", default=str(RESULTS / "search-peers"))
    p.add_argument(
        "--generator-flags",
        default="",
        help="more vLLM flags for the shared generator replica (one string)",
    )
    p.add_argument(
        "--prm-flags",
        default="",
        help="more engine flags for both sides' PRM servers (one string), e.g. --no-enforce-eager",
    )
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    t0 = time.monotonic()
    sides = run(args)
    out = Path(args.out)
    text = _report(sides, args, (time.monotonic() - t0) / 60)
    beside(out, ".md").write_text(text)
    _plot(sides, beside(out, ".png"))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
