"""``thinkgate bench NAME [args]``: run one benchmark (from a checkout of the repo).

Each writes its table (and plot) under ``benchmarks/results/<module>/``; ``--help`` after the
name lists its own options.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Sequence
from typing import Final

BENCHMARKS: Final[dict[str, tuple[str, str]]] = {
    "elastic": ("benchmarks.elastic", "accuracy vs tokens: elastic, truncation, vLLM budget"),
    "guidance": ("benchmarks.guidance", "budget guidance vs hard cut vs unconstrained"),
    "guidance-overhead": ("benchmarks.guidance_overhead", "decode throughput with guidance"),
    "sampling": ("benchmarks.sampling_accuracy", "majority / BoN / BoM accuracy vs N"),
    "fanout": ("benchmarks.fanout", "one n=N engine request vs N requests"),
    "pets": ("benchmarks.pets", "PETS online/offline vs uniform self-consistency"),
    "kernels": ("benchmarks.kernels_elastic", "elastic mask op vs a per-row loop"),
    "reward-ranking": ("benchmarks.reward_within_question", "reward AUROC within one question"),
    "remote": ("benchmarks.remote", "gateway hop cost, one vs two vLLM replicas (--router)"),
    "router": ("benchmarks.router", "behind vllm-router vs own balancer; a replica killed"),
    "reliability": ("benchmarks.reliability", "overload, faults, drain, restarts, fuzz, soak"),
    "engine-wait": ("benchmarks.engine_wait", "vLLM's 1 s engine spin vs 1 ms, on CPU"),
    "executor": ("benchmarks.executor", "model in the engine core vs a worker process, CPU"),
    "stream-gaps": ("benchmarks.stream_gaps", "token gaps: engine ring recheck 20 ms vs 2 ms"),
    "confidence": ("benchmarks.confidence", "DeepConf: accuracy vs tokens, online early stop"),
    "confidence-grid": ("benchmarks.confidence_grid", "DeepConf defaults chosen on validation"),
    "overhead": ("benchmarks.overhead", "vs vLLM's server and the engine alone, vllm bench serve"),
    "interleaved": ("benchmarks.interleaved", "two servers up at once, short runs in turn, A/A"),
    "processors-idle": ("benchmarks.processors_idle", "engine with processors loaded, unused"),
    "peers": ("benchmarks.peers", "self-consistency vs its_hub IaaS and optillm on vLLM"),
    "search": ("benchmarks.search", "PRM step search vs sampling: accuracy against tokens"),
    "tree": ("benchmarks.tree", "tree sampling vs self-consistency, DeepConf, PRM searches"),
    "tree-lengths": ("benchmarks.tree_lengths", "samples right by how long they thought"),
    "vote-stop-replay": ("benchmarks.vote_stop_replay", "the tree's vote stop on plain samples"),
    "step-rows": ("benchmarks.step_rows", "one decoding step's cost by the rows in it"),
    "segment-cost": ("benchmarks.segment_cost", "a token's cost in 32-token requests, logprobs"),
    "step-confidence": ("benchmarks.step_confidence", "wrong steps: generator confidence vs PRM"),
    "search-peers": ("benchmarks.search_peers", "PRM search vs its_hub's, same engine and PRM"),
    "http-clients": ("benchmarks.http_clients", "client CPU per call: httpx vs aiohttp"),
    "budgets": ("benchmarks.budgets", "deadlines and token ceilings held; auto vs fixed plans"),
    "fit": ("benchmarks.fit", "thinkgate fit on a mixed workload, then its one judgment"),
    "batches": ("benchmarks.batches", "Batch API: two gateways on PostgreSQL, one killed"),
    "tenants": ("benchmarks.tenants", "one tenant's SC@32 flood beside another's plain requests"),
    "security": ("benchmarks.security", "the default server on a network: keys, origins, uploads"),
    "live-view": ("benchmarks.live_view", "the /ui live view in headless Chromium: render times"),
}


def _usage() -> str:
    rows = "\n".join(f"  {name:18s} {doc}" for name, (_, doc) in BENCHMARKS.items())
    return f"usage: thinkgate bench NAME [args]\n\nbenchmarks:\n{rows}\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(BENCHMARKS[name][0])
    entry = module.main
    # Older scripts parse sys.argv themselves; give them the same view.
    sys.argv = [f"thinkgate bench {name}", *rest]
    result = entry(rest) if inspect.signature(entry).parameters else entry()
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
