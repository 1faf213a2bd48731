"""``thinkgate bench overhead``: the gateway against vLLM's own OpenAI server, measured
with vLLM's own client (``vllm bench serve``), and against the engine alone.

Per pair (``--pairs``, at least 4 for a median worth reading), one at a time on the
same cores, in alternating order: vLLM's server, then ``thinkgate serve`` driven twice
(default routing, and ``X-Strategy: plain``), then ``thinkgate serve`` without logits
processors (``thinkgate-bare``: the very engine vLLM's server runs, so the ratio is the
gateway's own cost), then the engine alone (``AsyncLLM`` in process, no HTTP:
``benchmarks.overhead_engine``), each at every ``--rates`` (``inf``: all requests at once).
Same model (the testbed base), same engine settings
(float32, 512-token context, 64 sequences, no chunked prefill, eager, the 1 ms engine
spin for all), random prompts of ``--input-len`` tokens, ``--output-len`` tokens each
with ``ignore_eos``. thinkgate runs with ``--reward-model none`` (its second engine
would sit idle beside the measured one) and its default logits processors (confidence,
elastic, guidance with its wrapper model: what a user gets), or none (``-bare``).
After every thinkgate run the server's own ``/metrics`` say whether its event loop
stalled: probes that woke more than 10 ms / 50 ms late, and the garbage collector's
pauses (``loop_lag_over_10ms``, ``loop_lag_over_50ms``, ``gc_pause_ms`` in the JSON and
a table), and how long its streamed frames waited inside it (mean, share over 10 ms).
A ``vLLM / vLLM`` column sets vLLM's server against itself (each pair's run over the
previous pair's): how far a paired ratio moves here when nothing differs.

Each server (and the engine alone) first serves one unmeasured run of all the prompts at
once: the CPU kernels build their primitives on the first batch of each shape.

Reported: request and output-token throughput, TTFT, TPOT and ITL (p50/p99) for each,
and per rate the paired ratios thinkgate / vLLM server (median, min-max over pairs).
Writes ``benchmarks/results/overhead/overhead.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import testbed
from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import ROOT, ServerUrl, machine, thinkgate, vllm_server

RESULTS = results_of("overhead")
METRICS = (
    "request_throughput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
)
# CPU time of the HTTP front end's process per generated token: what the server itself
# spends beside the engine (its engine core is another process). A count, not a timing,
# so it holds still on a shared machine where the latency percentiles do not.
FRONTEND = "frontend_cpu_us_per_token"
# Share of inter-token gaps over 15 ms, in %. A few late steps decide p99 ITL: with the
# engine ring rechecked every 20 ms, a dropped wake-up made a ~24 ms gap in every
# server (benchmarks.stream_gaps), and p99 jumped between ~10 and ~24 ms depending on
# whether those steps were just under or just over 1% of the gaps: the share itself
# moves smoothly, and is what a server's own stalls would add to.
SLOW_GAPS = "itl_over_15ms_pct"
SLOW_GAP_S = 0.015
SYSTEMS = ("vllm", "thinkgate", "thinkgate-plain", "thinkgate-bare", "engine")
COMPARED = ("thinkgate", "thinkgate-plain", "thinkgate-bare")  # each against vllm, paired
STALLS = ("loop_lag_over_10ms", "loop_lag_over_50ms", "gc_pause_ms")
# Streamed frames' stay in the gateway (thinkgate_stream_frame_wait_seconds): from the
# strategy's event to the socket write, timed inside the server, so engine and machine
# noise do not reach it the way they reach the client's inter-token latencies.
FRAMES = ("frame_wait_s", "frames", "frames_over_10ms")
FRAME_COLUMNS = ("frame_wait_mean_ms", "frames_over_10ms_pct")
ENGINE_FLAGS = (
    "--max-num-seqs", "64", "--max-num-batched-tokens", "32768", "--no-enable-chunked-prefill",
)  # fmt: skip


@contextmanager
def served(side: str, model: str, log: Path) -> Iterator[ServerUrl]:
    """One compared server up: ``vllm`` (vLLM's OpenAI server), ``thinkgate`` (its
    default logits processors) or ``bare`` (none: the engine vLLM's server runs), all
    with the same engine settings; thinkgate without its reward engine, which would sit
    idle beside the measured one."""
    if side == "vllm":
        with vllm_server(model, *ENGINE_FLAGS, log=log) as url:
            yield url
        return
    flags = ["--reward-model", "none", "--served-model-name", model]
    if side == "bare":
        flags += ["--logits-processors", "[]"]
    with thinkgate(model, *flags, log=log) as url:
        yield url


def bench_serve(url: str, model: str, tokenizer: str, rate: float, args: argparse.Namespace,
                headers: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """One ``vllm bench serve`` run (vLLM's own client, in a subprocess); its result JSON."""
    out = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    argv = [
        "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--num-prompts", str(args.prompts),
        "--request-rate", str(rate), "--ignore-eos", "--seed", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--save-detailed", "--result-dir", str(out),
        "--result-filename", "r.json",
    ]  # fmt: skip
    for h in headers:
        argv += ["--header", h]
    code = (
        "import sys\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.benchmarks.serve import add_cli_args, main\n"
        "p = FlexibleArgumentParser(); add_cli_args(p)\n"
        "main(p.parse_args(sys.argv[1:]))\n"
    )
    log = LOGS / "overhead-bench-serve.log"
    with log.open("ab") as f:
        subprocess.run([sys.executable, "-c", code, *argv], check=True, stdout=f, stderr=f)
    data: dict[str, Any] = json.loads((out / "r.json").read_text())
    gaps = [g for itls in data["itls"] for g in itls]  # seconds, every request's
    slow = sum(g > SLOW_GAP_S for g in gaps)
    return {k: float(data[k]) for k in METRICS} | {SLOW_GAPS: 100.0 * slow / max(1, len(gaps))}


def _engine_alone(model: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    cmd = [sys.executable, "-m", "benchmarks.overhead_engine", "--model", model]
    cmd += ["--rates", ",".join(str(r) for r in args.rates), "--prompts", str(args.prompts)]
    cmd += ["--input-len", str(args.input_len), "--output-len", str(args.output_len)]
    with (LOGS / "overhead-engine.log").open("ab") as log:
        done = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, stderr=log)
    line = next(x for x in done.stdout.decode().splitlines() if x.startswith("RESULT "))
    got: dict[str, dict[str, float]] = json.loads(line[len("RESULT ") :])
    return got


def run(args: argparse.Namespace) -> dict[str, Any]:
    model = str(testbed.model_path("base"))
    os.environ["THINKGATE_ENGINE_SPIN_MS"] = "1"  # every engine waits alike (our plugin)
    LOGS.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))

    def record(system: str, rate: float, got: dict[str, float]) -> None:
        runs[system][key(rate)].append(got)
        print(f"[overhead] {system:16s} rate {rate}: {json.dumps(got)}", flush=True)

    def warm(url: str) -> None:
        """One unmeasured run at full concurrency on a fresh server: the first batches of
        each shape build the CPU kernels' primitives, which whichever run came first
        would otherwise pay alone."""
        bench_serve(url, model, model, float("inf"), args)
        print("[overhead] warmed up", flush=True)

    def timed(url: ServerUrl, rate: float, headers: Sequence[str] = ()) -> dict[str, float]:
        cpu = _frontend_cpu_s(url)
        got = bench_serve(url, model, model, rate, args, headers=headers)
        tokens = args.prompts * args.output_len  # --ignore-eos: every request runs to the end
        return got | {FRONTEND: (_frontend_cpu_s(url) - cpu) / tokens * 1e6}

    def vllm_side() -> None:
        with served("vllm", model, LOGS / "overhead-vllm.log") as url:
            warm(url)
            for rate in args.rates:
                record("vllm", rate, timed(url, rate))

    def measured(url: ServerUrl, rate: float, headers: Sequence[str] = ()) -> dict[str, float]:
        before = _loop_stalls(url)
        got = timed(url, rate, headers)
        after = _loop_stalls(url)
        return got | {k: after[k] - before[k] for k in (*STALLS, *FRAMES)}

    def thinkgate_side() -> None:
        with served("thinkgate", model, LOGS / "overhead-thinkgate.log") as url:
            warm(url)
            for rate in args.rates:
                record("thinkgate", rate, measured(url, rate))
                record("thinkgate-plain", rate, measured(url, rate, ("X-Strategy=plain",)))

    def bare_side() -> None:
        with served("bare", model, LOGS / "overhead-thinkgate-bare.log") as url:
            warm(url)
            for rate in args.rates:
                record("thinkgate-bare", rate, measured(url, rate))

    for pair in range(args.pairs):
        started = time.monotonic()
        sides = (vllm_side, thinkgate_side, bare_side)
        if pair % 2:
            sides = sides[::-1]
        for side in sides:
            side()
        for rate, got in _engine_alone(model, args).items():
            record("engine", float(rate), got)
        print(f"[overhead] pair {pair + 1}/{args.pairs}: {time.monotonic() - started:.0f} s")
    return {"runs": {s: dict(r) for s, r in runs.items()}}


def _frontend_cpu_s(url: ServerUrl) -> float:
    """User + system CPU seconds of the server's own process so far (children excluded)."""
    import psutil

    times = psutil.Process(url.pid).cpu_times()
    return float(times.user + times.system)


def _loop_stalls(url: str) -> dict[str, float]:
    """The server's stall counters so far (``stall_counters`` of its /metrics)."""
    import httpx

    return stall_counters(httpx.get(f"{url}/metrics", timeout=10).text)


def stall_counters(text: str) -> dict[str, float]:
    """From a /metrics text: loop-lag probes later than 10 ms and 50 ms
    (``thinkgate_event_loop_lag_seconds``), milliseconds spent collecting garbage
    (``thinkgate_gc_pause_seconds``, all generations), and streamed frames: their total
    wait in seconds, how many, how many waited over 10 ms
    (``thinkgate_stream_frame_wait_seconds``)."""
    got = {k: 0.0 for k in (*STALLS, *FRAMES)}
    frames_fast = 0.0
    count = below_10 = below_50 = 0.0
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == "thinkgate_event_loop_lag_seconds_count":
            count = float(value)
        elif name == 'thinkgate_event_loop_lag_seconds_bucket{le="0.01"}':
            below_10 = float(value)
        elif name == 'thinkgate_event_loop_lag_seconds_bucket{le="0.05"}':
            below_50 = float(value)
        elif name == "thinkgate_stream_frame_wait_seconds_sum":
            got["frame_wait_s"] = float(value)
        elif name == "thinkgate_stream_frame_wait_seconds_count":
            got["frames"] = float(value)
        elif name == 'thinkgate_stream_frame_wait_seconds_bucket{le="0.01"}':
            frames_fast = float(value)
        elif name.startswith("thinkgate_gc_pause_seconds_sum"):
            got["gc_pause_ms"] += float(value) * 1e3
    got["loop_lag_over_10ms"] = count - below_10
    got["loop_lag_over_50ms"] = count - below_50
    got["frames_over_10ms"] = got["frames"] - frames_fast
    return got


def key(rate: float | str) -> str:
    """One spelling per rate ("inf", "30", "15") whether it came as 30, 30.0 or "30.0"."""
    return f"{float(rate):g}"


def _ratios(runs: dict[str, Any], system: str, rate: str, metric: str) -> list[float]:
    mine, base = runs[system][rate], runs["vllm"][rate]
    pairs = zip(mine, base, strict=False)
    return [a[metric] / b[metric] for a, b in pairs if a.get(metric) and b.get(metric)]


def _drift(runs: dict[str, Any], rate: str, metric: str) -> list[float]:
    """vLLM's server against itself: each pair's run over the previous pair's. Nothing
    differs but the instance and the minute, so these ratios show how far a paired ratio
    moves on this machine when the servers are equal."""
    base = runs["vllm"][rate]
    return [
        b[metric] / a[metric]
        for a, b in itertools.pairwise(base)
        if a.get(metric) and b.get(metric)
    ]


def _spread_cell(values: Sequence[float], form: str = "{:.2f}") -> str:
    """Median (max), or '-' when there is nothing (runs recorded before a counter existed)."""
    if not values:
        return "-"
    return f"{form.format(statistics.median(values))} (max {form.format(max(values))})"


def _median_cell(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def _ratio_cell(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _report(result: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    runs = result["runs"]
    lines = [
        "# Overhead: thinkgate vs vLLM's own server vs the engine alone",
        "",
        f"`{command}` on {machine()}; vLLM's `bench serve` (random dataset, "
        f"{args.input_len} in / {args.output_len} out, {args.prompts} prompts, `--ignore-eos`), "
        f"{args.pairs} interleaved pairs per rate. Medians over pairs; ratios are paired "
        "(thinkgate run / vLLM server run of the same pair): median (min-max).",
        "",
    ]
    for rate in (key(r) for r in args.rates):
        lines += [f"## request rate {rate}", ""]
        heads = " | ".join(f"{s.replace('thinkgate-', '')} / vLLM" for s in COMPARED)
        lines.append("| metric | " + " | ".join(SYSTEMS) + " | " + heads + " | vLLM / vLLM |")
        lines.append("|---|" + "---:|" * (len(SYSTEMS) + len(COMPARED) + 1))
        for m in (*METRICS, SLOW_GAPS, FRONTEND):
            cells = [_median_cell([x[m] for x in runs[s][rate] if m in x]) for s in SYSTEMS]
            cells += [_ratio_cell(_ratios(runs, s, rate, m)) for s in COMPARED]
            cells.append(_ratio_cell(_drift(runs, rate, m)))
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
        lines.append(
            "Event-loop stalls and streamed frames' wait in the gateway during each thinkgate "
            "run (median over pairs, max):"
        )
        lines.append("")
        lines.append("| system | " + " | ".join((*STALLS, *FRAME_COLUMNS)) + " |")
        lines.append("|---|" + "---:|" * (len(STALLS) + len(FRAME_COLUMNS)))
        for s in COMPARED:
            got = [x for x in runs[s][rate] if STALLS[0] in x]
            cells = [_spread_cell([x[k] for x in got], "{:.0f}") for k in STALLS]
            timed = [x for x in got if x.get("frames")]
            cells.append(_spread_cell([1e3 * x["frame_wait_s"] / x["frames"] for x in timed]))
            cells.append(_spread_cell([100 * x["frames_over_10ms"] / x["frames"] for x in timed]))
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(
        "Throughput ratios >= 0.97 count as parity on this noisy 2-core machine; latency "
        "ratios above 1 mean thinkgate is slower. `engine` is the ceiling for any server. "
        "`thinkgate-bare` runs the same engine as vLLM's server (no logits processors, no "
        "guidance wrapper): bare / vLLM is what the gateway itself costs; thinkgate / bare "
        "is what the default processors cost the engine. `frontend_cpu_us_per_token`: CPU "
        "time of the server's HTTP process (its engine core excluded) per generated token, "
        "from /proc; the engine alone has no front end. `itl_over_15ms_pct`: the share of "
        "inter-token gaps over 15 ms (all requests' gaps, from bench serve's detailed "
        "result), a steadier form of the ITL tail than p99. `vLLM / vLLM`: vLLM's server "
        "against itself (each pair's run over the previous pair's): how far a ratio moves "
        "when nothing differs; `thinkgate bench interleaved --a bare --b bare` measures the "
        "same for many short pairs. The loop-lag probe wakes every 50 ms, so a run of ~10 s "
        "takes ~200 probes. `frame_wait_mean_ms` / `frames_over_10ms_pct`: how long "
        "streamed frames waited in the gateway between the strategy's event and the socket "
        "write (`thinkgate_stream_frame_wait_seconds`), timed inside the server."
    )
    return "\n".join(lines) + "\n"


def _plot(result: dict[str, Any], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result["runs"]
    shown = ("output_throughput", "median_ttft_ms", "p99_itl_ms", SLOW_GAPS, FRONTEND)
    fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 3.6))
    rates = [key(r) for r in args.rates]
    width = 0.8 / len(SYSTEMS)
    for ax, m in zip(axes, shown, strict=True):
        for i, s in enumerate(SYSTEMS):
            got = [[x[m] for x in runs[s][r] if m in x] for r in rates]
            vals = [statistics.median(g) if g else 0.0 for g in got]
            ax.bar([j + i * width for j in range(len(rates))], vals, width, label=s)
        ax.set_xticks(
            [j + 0.4 - width / 2 for j in range(len(rates))], [f"rate {r}" for r in rates]
        )
        ax.set_title(m)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench overhead", description=__doc__)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument(
        "--rates",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[float("inf"), 30.0, 15.0],
    )
    parser.add_argument(
        "--report-only", action="store_true", help="redo the table and plot from overhead.json"
    )
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args(list(argv) if argv is not None else None)
    command = "thinkgate bench overhead " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.report_only:
        result = json.loads((RESULTS / "overhead.json").read_text())
        saved = result["_meta"]
        command = saved["command"]
        args = argparse.Namespace(
            **{**saved["args"], "rates": [float(r) for r in saved["args"]["rates"]]}
        )
        result["runs"] = {
            s: {key(r): v for r, v in by_rate.items()} for s, by_rate in result["runs"].items()
        }
    else:
        result = run(args)
        result["_meta"] = {"command": command.strip(), "machine": machine(), "args": vars(args)}
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "overhead.json").write_text(json.dumps(result, indent=2, default=str))
    text = _report(result, args, command.strip())
    (RESULTS / "overhead.md").write_text(text)
    _plot(result, args, RESULTS / "overhead.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
