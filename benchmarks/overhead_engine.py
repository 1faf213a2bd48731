"""The engine alone: vLLM's ``AsyncLLM`` in process, no HTTP, driven like ``vllm bench
serve`` drives a server (random prompts of fixed length, ``ignore_eos``, Poisson
arrivals or all at once). The limit any HTTP server in front of the engine can reach;
``benchmarks.overhead`` runs it as a subprocess and reads one JSON line from stdout.

``python -m benchmarks.overhead_engine --model DIR --rates inf,30 --prompts 100
--input-len 32 --output-len 64``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

from benchmarks.overhead import SLOW_GAP_S, SLOW_GAPS
from benchmarks.reliability import pct


async def timed(counts: AsyncIterator[int]) -> dict[str, Any]:
    """One request's client-side timings, from its stream of new-token counts."""
    started = time.perf_counter()
    times: list[float] = []
    seen = 0
    async for n in counts:
        if n > 0:
            times.append(time.perf_counter())
            seen += n
    ended = time.perf_counter()
    ttft = times[0] - started
    itl = [b - a for a, b in zip(times, times[1:], strict=False)]
    tpot = (ended - times[0]) / max(1, seen - 1)
    return {"ttft": ttft, "itl": itl, "tpot": tpot, "tokens": seen, "e2e": ended - started}


async def _llm_counts(llm: Any, prompt: list[int], params: Any) -> AsyncIterator[int]:
    from vllm.inputs import TokensPrompt

    seen = 0
    async for out in llm.generate(TokensPrompt(prompt_token_ids=prompt), params, uuid.uuid4().hex):
        n = len(out.outputs[0].token_ids)
        yield n - seen
        seen = n


async def run_rate(one: Callable[[list[int]], Coroutine[Any, Any, dict[str, Any]]],
                   prompts: list[list[int]], rate: float) -> dict[str, Any]:  # fmt: skip
    """Every prompt through ``one`` (a :func:`timed` request), Poisson arrivals at ``rate``
    (seeded: every run the same schedule) or all at once; the metrics ``bench serve`` names."""
    rng = random.Random(0)
    tasks: list[asyncio.Task[dict[str, Any]]] = []
    started = time.perf_counter()
    for p in prompts:
        tasks.append(asyncio.create_task(one(p)))
        if rate != float("inf"):
            await asyncio.sleep(rng.expovariate(rate))
    results = await asyncio.gather(*tasks)
    duration = time.perf_counter() - started
    ttft = [r["ttft"] * 1000 for r in results]
    tpot = [r["tpot"] * 1000 for r in results]
    itl = [x * 1000 for r in results for x in r["itl"]]
    tokens = sum(r["tokens"] for r in results)
    return {
        "request_throughput": len(results) / duration,
        "output_throughput": tokens / duration,
        "median_ttft_ms": statistics.median(ttft),
        "p99_ttft_ms": pct(ttft, 0.99),
        "median_tpot_ms": statistics.median(tpot),
        "p99_tpot_ms": pct(tpot, 0.99),
        "median_itl_ms": statistics.median(itl) if itl else float("nan"),
        "p99_itl_ms": pct(itl, 0.99),
        SLOW_GAPS: 100.0 * sum(x > SLOW_GAP_S * 1e3 for x in itl) / max(1, len(itl)),
    }


def random_prompts(vocab: int, count: int, length: int) -> list[list[int]]:
    """Ordinary tokens only (ids past the specials), like vLLM's random dataset."""
    rng = random.Random(1)
    low = min(16, vocab - 1)
    return [[rng.randrange(low, vocab) for _ in range(length)] for _ in range(count)]


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    extra: dict[str, Any] = {}
    # What thinkgate's engine adds for budget guidance, alone or together: the wrapper
    # architecture (hidden states for the predictor) and the logits processor.
    if args.guidance in ("wrapper", "both"):
        from kernels.guidance import plugin as bg_plugin

        extra["hf_overrides"] = bg_plugin.hf_overrides()
    if args.guidance in ("processor", "both"):
        from kernels.guidance.vllm_v1 import BudgetGuidanceLogitsProcessor

        extra["logits_processors"] = [BudgetGuidanceLogitsProcessor]
    llm = AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=args.model,
            dtype="float32",
            max_model_len=512,
            max_num_seqs=64,
            max_num_batched_tokens=64 * 512,
            enable_chunked_prefill=False,
            enforce_eager=True,
            disable_log_stats=True,
            **extra,
        )
    )
    try:
        vocab = llm.tokenizer.vocab_size if llm.tokenizer is not None else 64
        prompts = random_prompts(vocab, args.prompts, args.input_len)
        params = SamplingParams(max_tokens=args.output_len, ignore_eos=True, temperature=1.0)

        def one(prompt: list[int]) -> Coroutine[Any, Any, dict[str, Any]]:
            return timed(_llm_counts(llm, prompt, params))

        # Warm-up, not measured: every batch shape once, as the servers get (overhead.py).
        await run_rate(one, prompts, float("inf"))
        out: dict[str, Any] = {}
        for rate in args.rates:
            runs = [await run_rate(one, prompts, rate) for _ in range(args.repeat)]
            out[str(rate)] = runs[0] if args.repeat == 1 else runs
        return out
    finally:
        llm.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead_engine")
    parser.add_argument("--model", required=True)
    parser.add_argument(
        "--rates", type=lambda s: [float(x) for x in s.split(",")], default=[float("inf")]
    )
    parser.add_argument("--prompts", type=int, default=100)
    parser.add_argument("--input-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument(
        "--guidance",
        choices=("off", "wrapper", "processor", "both"),
        default="off",
        help="load budget guidance's wrapper model and/or processor (no request uses it)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per rate (a list each)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    result = asyncio.run(_main(args))
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
