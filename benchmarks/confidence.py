"""DeepConf: accuracy against generated tokens, self-consistency vs confidence votes vs
online early stopping, all through the live HTTP API (openai SDK) of one server.

Per held-out testbed question (test split, 9-12 operations, temperature 1), for each
sample budget N of ``--ns``:

  sc            ``self-consistency`` N, majority vote (the baseline)
  conf-offline  the same pool, confidence-weighted vote (``vote: confidence``); and
  conf-top      the same pool, the most confident ``--filter`` share votes (DeepConf
                offline): both read from the one ``self-consistency`` answer, whose
                ``thinkgate`` object lists every sample's answer and confidence, so they
                cost exactly the tokens of sc
  online        ``deepconf`` N with its defaults (chosen on validation questions by
                ``benchmarks/confidence_grid.py``: variant high, warm-up >= 4, rounds of
                1, consensus 0.6)
  online-paper  ``deepconf`` N with the paper's settings (variant low, consensus 0.95,
                warm-up max(2, ceil(N/4)) and rounds of that size): the previous defaults
  pets          ``pets`` with N as its cap (the shipped table plans an average of 16)

Accuracy is the share of questions whose returned answer equals the gold one; tokens are
the mean ``usage.completion_tokens`` per question (every sample, stopped traces
included). The headline: tokens each method spends to reach sc@max(N)'s accuracy.

Also measured, in-process and before the server starts: the confidence processor's
cost on an undecided batch (threshold never reached, so nothing is stopped), as decode
throughput relative to the same engine with the processor idle, interleaved repeats.

    .venv/bin/python -m benchmarks.confidence [--questions 24] [--ns 8,16]

Writes ``benchmarks/results/confidence/confidence.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import machine, thinkgate
from strategies.answers import equivalent
from strategies.sampling.deepconf import default_warmup
from strategies.selection import select_weighted, top_by_count
from strategies.voting import VoteOptions, voting_classes
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("confidence")
METHODS = ("sc", "conf-offline", "conf-top", "online", "online-paper", "pets")
ONLINE = ("online", "online-paper")


def _online_body(name: str, n: int, window: int) -> dict[str, Any]:
    """The deepconf body of an online method at budget ``n``."""
    if name == "online":
        # Rounds of one trace: the token-saving schedule this bench measures (the default
        # schedule sizes rounds by the engine's load; `thinkgate bench peers --load`).
        return {"confidence_window": window, "round_size": 1}
    warmup = default_warmup(n, floor=2)
    return {
        "confidence_window": window,
        "variant": "low",
        "consensus": 0.95,
        "warmup": warmup,
        "round_size": warmup,
    }


def _right(answer: str | None, q: Question) -> bool:
    return answer is not None and equivalent(answer, str(q.answer))


async def _ask(
    client: Any, model: str, q: Question, headers: dict[str, str], body: dict[str, Any]
) -> Any:
    return await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": q.prompt}],
        temperature=1.0,
        extra_headers=headers,
        extra_body=body,
    )


def _answer_of(r: Any) -> str | None:
    info = r.choices[0].model_extra.get("thinkgate") or {}
    answer = info.get("answer")
    return answer if isinstance(answer, str) else None


async def _run_questions(
    url: str, questions: Sequence[Question], ns: Sequence[int], window: int, share: float
) -> list[dict[str, Any]]:
    import openai
    from tqdm import tqdm

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=1800)
    model = (await client.models.list()).data[0].id
    gate = asyncio.Semaphore(2)
    bar = tqdm(total=len(questions) * len(ns), desc="questions x budgets", unit="q")

    async def one(q: Question, n: int) -> dict[str, Any]:
        async with gate:
            samples = {"X-Budget-Samples": str(n)}
            sc = await _ask(
                client,
                model,
                q,
                {"X-Strategy": "self-consistency", **samples},
                {"vote": "confidence", "confidence_window": window},
            )
            tg = sc.model_extra["thinkgate"]
            answers, confs = tg["sample_answers"], tg["sample_rewards"]
            tokens = sc.usage.completion_tokens
            row: dict[str, Any] = {"q": q.answer, "n": n}
            majority = top_by_count(voting_classes(answers, None, VoteOptions()), 1)
            row["sc"] = (_right(majority[0].answer if majority else None, q), tokens)
            for name, vote in (("conf-offline", "confidence"), ("conf-top", "confidence-top")):
                opts = VoteOptions(vote=vote, share=share, window=window)  # type: ignore[arg-type]
                chosen = select_weighted(voting_classes(answers, confs, opts), 1).chosen
                row[name] = (_right(chosen[0].answer if chosen else None, q), tokens)
            for name in ONLINE:
                r = await _ask(
                    client,
                    model,
                    q,
                    {"X-Strategy": "deepconf", **samples},
                    _online_body(name, n, window),
                )
                t = r.model_extra["thinkgate"]
                row[name] = (_right(_answer_of(r), q), r.usage.completion_tokens)
                row[f"{name}-stopped"] = t["stopped_early"]
                row[f"{name}-drawn"] = t["samples"]
                row[f"{name}-rounds"] = t["rounds"]
            r = await _ask(client, model, q, {"X-Strategy": "pets", **samples}, {})
            row["pets"] = (_right(_answer_of(r), q), r.usage.completion_tokens)
        bar.update(1)
        return row

    rows = await asyncio.gather(*(one(q, n) for q in questions for n in ns))
    bar.close()
    return list(rows)


def _summarise(
    rows: Sequence[dict[str, Any]], ns: Sequence[int]
) -> dict[str, dict[int, dict[str, float]]]:
    table: dict[str, dict[int, dict[str, float]]] = {}
    for m in METHODS:
        table[m] = {}
        for n in ns:
            mine = [r[m] for r in rows if r["n"] == n]
            table[m][n] = {
                "accuracy": 100.0 * statistics.fmean(ok for ok, _ in mine),
                "tokens": statistics.fmean(t for _, t in mine),
            }
    for m in ONLINE:
        for n in ns:
            mine = [r for r in rows if r["n"] == n]
            table[m][n]["stopped"] = statistics.fmean(r[f"{m}-stopped"] for r in mine)
            table[m][n]["drawn"] = statistics.fmean(r[f"{m}-drawn"] for r in mine)
            table[m][n]["rounds"] = statistics.fmean(r.get(f"{m}-rounds", 0) for r in mine)
    return table


def _to_reach(
    table: dict[str, dict[int, dict[str, float]]], ns: Sequence[int]
) -> dict[str, float | None]:
    """Per method: the fewest mean tokens at which it reaches sc@max(N)'s accuracy,
    relative to the fewest tokens at which sc itself reaches it (sc's own curve: on an
    easy set a smaller N may already get there). None: not reached at the budgets tried."""
    goal = table["sc"][max(ns)]["accuracy"]
    out: dict[str, float | None] = {}
    cheapest_sc = min(v["tokens"] for v in table["sc"].values() if v["accuracy"] >= goal)
    for m in METHODS:
        ok = [v["tokens"] for v in table[m].values() if v["accuracy"] >= goal]
        out[m] = min(ok) / cheapest_sc if ok else None
    return out


def _processor_overhead(prompts: int, tokens: int, repeats: int) -> dict[str, float]:
    """Decode throughput of one engine with the confidence processor loaded: requests
    that opt in with a threshold no window reaches (every row computed, none stopped)
    vs the same requests not opting in, alternating, ``repeats`` pairs. Also the cost of
    asking vLLM for the top-5 logprobs (what the strategy reads per token)."""
    from vllm import SamplingParams

    from kernels.confidence import args as conf_args
    from kernels.confidence.vllm_v1 import ConfidenceLogitsProcessor
    from kernels.offline_engine import cpu_llm
    from testbed.tokenizer import chat_prompt

    llm = cpu_llm(model_path("base"), logits_processors=[ConfidenceLogitsProcessor])
    texts = [
        chat_prompt(q.prompt)
        for q in make_questions("test", prompts, seed=5, min_ops=9, max_ops=12)
    ]
    guard = conf_args.extra_args(
        conf_args.ConfidenceArgs(threshold=-1e9, window=16, top_k=5, eos_id=0)
    )
    modes = {
        "idle": SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=1.0, seed=1),
        "active": SamplingParams(
            max_tokens=tokens, ignore_eos=True, temperature=1.0, seed=1, extra_args=guard
        ),
        "active+logprobs": SamplingParams(
            max_tokens=tokens,
            ignore_eos=True,
            temperature=1.0,
            seed=1,
            extra_args=guard,
            logprobs=5,
            flat_logprobs=True,
        ),
    }
    llm.generate(texts, modes["idle"], use_tqdm=False)  # warm-up: every prompt cached
    rates: dict[str, list[float]] = {m: [] for m in modes}
    names = list(modes)
    for r in range(repeats):
        # Rotate the order each repeat: no mode always runs first (or after another).
        for name in names[r % len(names) :] + names[: r % len(names)]:
            params = modes[name]
            t0 = time.perf_counter()
            outs = llm.generate(texts, params, use_tqdm=False)
            dt = time.perf_counter() - t0
            rates[name].append(sum(len(o.outputs[0].token_ids) for o in outs) / dt)
    del llm
    base = statistics.median(rates["idle"])
    return {
        **{f"{m}_tok_s": statistics.median(v) for m, v in rates.items()},
        **{f"{m}_ratio": statistics.median(v) / base for m, v in rates.items()},
        "pairs": repeats,
    }


def _choose_measure(
    questions: int, samples: int, windows: Sequence[int], ks: Sequence[int]
) -> dict[str, float]:
    """How well each trace-confidence definition tells right traces from wrong ones:
    AUROC of the lowest group confidence, per window ``w`` and top-k ``k``, over
    ``samples`` temperature-1 traces of ``questions`` validation questions (never the
    test ones the rest of the benchmark scores). What chose the defaults."""
    from vllm import SamplingParams

    from core.token_confidence import lowest_group
    from core.token_confidence import token_confidence as conf_of
    from testbed.engine import load_llm, to_completion
    from testbed.metrics import auroc
    from testbed.tokenizer import CharCodec, chat_prompt

    qs = make_questions("validation", questions, seed=9, min_ops=9, max_ops=12)
    llm = load_llm(model_path("base"), seed=0)
    params = SamplingParams(
        n=samples,
        temperature=1.0,
        max_tokens=420,
        logprobs=max(ks),
        seed=4,
        skip_special_tokens=False,
    )
    outs = llm.generate([chat_prompt(q.prompt) for q in qs], params, use_tqdm=True)
    del llm
    codec = CharCodec()
    traces: list[tuple[list[list[float]], bool]] = []  # per token: its top logprobs
    for q, out in zip(qs, outs, strict=True):
        for o in out.outputs:
            tops = [
                sorted((lp.logprob for lp in pos.values()), reverse=True)
                for pos in o.logprobs or []
            ]
            traces.append((tops, to_completion(codec, q, o.token_ids).correct))
    labels = [ok for _, ok in traces]
    scores: dict[str, float] = {"traces": float(len(traces)), "right": float(sum(labels))}
    for k in ks:
        confs = [[conf_of(t[:k], k) for t in tops] for tops, _ in traces]
        for w in windows:
            scores[f"w={w},k={k}"] = auroc([lowest_group(c, w) for c in confs], labels)
        scores[f"mean,k={k}"] = auroc([sum(c) / max(1, len(c)) for c in confs], labels)
    return scores


def plot(table: dict[str, dict[int, dict[str, float]]], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in METHODS:
        pts = sorted((v["tokens"], v["accuracy"], n) for n, v in table[m].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=m)
        for x, y, n in pts:
            ax.annotate(f"N={n}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("generated tokens per question (mean)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("DeepConf on the testbed: accuracy vs tokens (9-12 operations, T=1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _write_report(
    args: argparse.Namespace,
    table: dict[str, dict[int, dict[str, float]]],
    reach: dict[str, float | None],
    overhead: dict[str, float] | None,
    seconds: float,
    choose: dict[str, float] | None = None,
) -> str:
    ns = sorted({n for v in table.values() for n in v})
    lines = [
        "# DeepConf: accuracy vs generated tokens (thinkgate bench confidence)",
        "",
        f"Machine: {machine()}. Command: `.venv/bin/python -m benchmarks.confidence "
        f"--questions {args.questions} --ns {args.ns} --window {args.window} "
        f"--overhead-prompts {args.overhead_prompts} --overhead-tokens {args.overhead_tokens} "
        f"--overhead-repeats {args.overhead_repeats}`. "
        f"{args.questions} held-out questions (test split, 9-12 operations), temperature 1, "
        f"testbed `base`, all through the live HTTP API; {seconds / 60:.1f} min.",
        "",
        "| method | " + " | ".join(f"N={n} acc % | N={n} tokens" for n in ns) + " |",
        "|---|" + "---|---|" * len(ns),
    ]
    for m in METHODS:
        cells = " | ".join(
            f"{table[m][n]['accuracy']:.1f} | {table[m][n]['tokens']:.0f}" for n in ns
        )
        lines.append(f"| {m} | {cells} |")
    lines += [
        "",
        "Online traces stopped in the engine (mean per question, of traces drawn; online "
        "rounds after the warm-up):",
        "",
    ]
    for m in ONLINE:
        parts = [
            f"N={n}: {table[m][n]['stopped']:.1f} of {table[m][n]['drawn']:.1f}"
            f" in {table[m][n].get('rounds', 0):.1f} rounds"
            for n in ns
        ]
        lines.append(f"- {m}: " + ", ".join(parts))
    top = max(ns)
    goal = table["sc"][top]["accuracy"]
    cheapest = min(v["tokens"] for v in table["sc"].values() if v["accuracy"] >= goal)
    lines += [
        "",
        "At the same sample budget N, tokens relative to sc@N (accuracy in the table):",
        "",
        *[
            f"- {m}: "
            + ", ".join(
                f"N={n}: {table[m][n]['tokens'] / table['sc'][n]['tokens']:.2f}x" for n in ns
            )
            for m in METHODS
            if m.startswith(("online", "pets"))
        ],
        "",
        f"Tokens to reach sc@{top}'s accuracy ({goal:.1f}%), relative to the fewest tokens "
        f"at which sc itself reaches it ({cheapest:.0f}; sc@{top} spends "
        f"{table['sc'][top]['tokens']:.0f}); lower is better, 'never': not reached at the "
        "budgets tried:",
        "",
    ]
    first = min(n for n in ns if table["sc"][n]["accuracy"] >= goal)
    if first < top:
        lines.append(
            f"(sc reaches it already at N={first}: on this set majority voting saturates "
            "early, so the headline compares against sc's own cheapest point.)"
        )
        lines.append("")
    for m, v in reach.items():
        if v is None:
            lines.append(f"- {m}: never")
        else:
            change = f"{(1 - v) * 100:.0f}% fewer" if v <= 1 else f"{(v - 1) * 100:.0f}% more"
            lines.append(f"- {m}: {v:.2f}x ({change})")
    top_tokens = table["sc"][top]["tokens"]
    lines += [
        "",
        f"The same, relative to sc@{top}'s own tokens ({top_tokens:.0f}; the paper's "
        "comparison: the same budget):",
        "",
    ]
    for m, v in reach.items():
        if v is not None:
            ratio = v * cheapest / top_tokens
            lines.append(f"- {m}: {ratio:.2f}x ({(1 - ratio) * 100:.0f}% fewer)")
    if choose:
        keys = [key for key in choose if key.startswith(("w=", "mean"))]
        lines += [
            "",
            f"Choosing the measure (validation questions, 9-12 operations, "
            f"{int(choose['traces'])} traces at T=1, {int(choose['right'])} right): AUROC of "
            "each trace confidence for telling right traces from wrong ones (lowest group "
            "confidence over windows of w tokens, top-k logprobs per token; `mean`: the "
            "whole-trace mean):",
            "",
            "| measure | AUROC |",
            "|---|---|",
            *[f"| {key} | {choose[key]:.3f} |" for key in keys],
        ]
    if overhead:
        lines += [
            "",
            "Processor cost on an undecided batch (in process, vLLM `LLM`, "
            f"{args.overhead_prompts} prompts x {args.overhead_tokens} tokens, ignore_eos, "
            f"median of {int(overhead['pairs'])} interleaved runs): decode tok/s relative to "
            "the same engine with the processor idle:",
            "",
            f"- threshold set, never reached: {overhead['active_ratio']:.3f}x "
            f"({overhead['active_tok_s']:.0f} vs {overhead['idle_tok_s']:.0f} tok/s)",
            f"- and top-5 logprobs returned (what deepconf reads): "
            f"{overhead['active+logprobs_ratio']:.3f}x",
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--ns", default="8,16")
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--filter", type=float, default=0.7, help="conf-top's kept share")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--overhead-prompts", type=int, default=16)
    parser.add_argument("--overhead-tokens", type=int, default=128)
    parser.add_argument("--overhead-repeats", type=int, default=3)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--choose-questions", type=int, default=24)
    parser.add_argument("--skip-choose", action="store_true")
    parser.add_argument(
        "--overhead-only", action="store_true", help="only the processor cost (a JSON line)"
    )
    parser.add_argument("--url", default=None, help="a running thinkgate server (else start one)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the report from confidence.json (pass the run's own arguments)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    ns = [int(x) for x in args.ns.split(",")]
    if args.report_only:
        saved = json.loads((RESULTS / "confidence.json").read_text())
        table = {m: {int(n): v for n, v in per.items()} for m, per in saved["table"].items()}
        reach = _to_reach(table, ns)
        report = _write_report(
            args, table, reach, saved["overhead"], saved["seconds"], saved["choose"]
        )
        (RESULTS / "confidence.md").write_text(report)
        print(report)
        return 0
    questions = make_questions("test", args.questions, seed=args.seed, min_ops=9, max_ops=12)
    RESULTS.mkdir(parents=True, exist_ok=True)
    choose = None
    if not args.skip_choose and not args.overhead_only:
        choose = _choose_measure(args.choose_questions, 8, (8, 16, 32, 64, 128), (1, 5, 20))
        print(json.dumps(choose, indent=1))
    overhead = None
    if not args.skip_overhead:
        overhead = _processor_overhead(
            args.overhead_prompts, args.overhead_tokens, args.overhead_repeats
        )
        print(json.dumps(overhead, indent=1))
        if args.overhead_only:
            record = {
                **overhead,
                "prompts": args.overhead_prompts,
                "tokens": args.overhead_tokens,
                "machine": machine(),
            }
            (RESULTS / "overhead.json").write_text(json.dumps(record, indent=1))
            return 0
    t0 = time.perf_counter()
    if args.url:
        rows = asyncio.run(_run_questions(args.url, questions, ns, args.window, args.filter))
    else:
        log = LOGS / "confidence-server.log"
        # No reward engine: nothing here scores with it, and it would share the 2 cores.
        with thinkgate(model_path("base"), "--reward-model", "none", log=log) as url:
            rows = asyncio.run(_run_questions(url, questions, ns, args.window, args.filter))
    seconds = time.perf_counter() - t0
    table = _summarise(rows, ns)
    reach = _to_reach(table, ns)
    report = _write_report(args, table, reach, overhead, seconds, choose)
    (RESULTS / "confidence.md").write_text(report)
    (RESULTS / "confidence.json").write_text(
        json.dumps(
            {
                "table": table,
                "to_reach": reach,
                "overhead": overhead,
                "seconds": seconds,
                "choose": choose,
                "rows": rows,
            },
            indent=1,
        )
    )
    plot(table, RESULTS / "confidence.png")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
