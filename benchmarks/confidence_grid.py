"""DeepConf's settings chosen on validation questions, checked on held-out ones.

``deepconf`` has four knobs besides the sample budget N: the variant (threshold
percentile), the warm-up size, the round size and the consensus level. The paper's values
(a warm-up of 16, consensus 0.95) are for budgets of hundreds of traces; at N = 8-32 the
warm-up is a large part of the budget and 0.95 is unanimity. This benchmark records one
pool of temperature-1 traces per question with per-token confidences (top-5 logprobs, as
the engine reports them), replays DeepConf online over random orders of each pool for
every setting of a grid (``benchmarks/deepconf_sim.py``, the paper's own method), and
compares each setting's accuracy and tokens with self-consistency's curve on the same
pools:

1. on **validation** questions, settings are tried as deepconf's defaults would apply
   them at any budget N (variant, round size, consensus, the warm-up's floor); the one
   with the fewest tokens relative to sc@N among those as accurate as sc@N (within half
   a point) at N = 8 and 16 is chosen (what ``strategies/sampling/deepconf.py`` defaults to);
2. on **test** questions (never used for the choice) the chosen setting and the previous
   defaults (the paper's values, with either variant) are replayed and compared with
   sc@N and with sc at equal accuracy.

    .venv/bin/python -m benchmarks.confidence_grid [--questions 64] [--pool 32]

Writes ``benchmarks/results/confidence_grid/confidence-grid.{md,json,png}``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.deepconf_sim import (
    OnlineConfig,
    Point,
    SimTrace,
    expected,
    majority,
    online,
    tokens_at,
)
from benchmarks.out_paths import LOGS, results_of
from benchmarks.servers import machine
from strategies.sampling.deepconf import default_warmup
from strategies.voting import DEFAULT_TOP_K, DEFAULT_WINDOW
from testbed import model_path
from testbed.task import Question, make_questions

RESULTS = results_of("confidence_grid")
WINDOW = DEFAULT_WINDOW
TOP_K = DEFAULT_TOP_K
MAX_TOKENS = 420  # the testbed's 512-token context less the longest prompts
VARIANTS = ("low", "high")
ROUNDS: tuple[int | None, ...] = (1, 2, None)  # None: rounds of the warm-up's size
CONSENSUS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.8, 0.9, 0.95, 1.0)
MIN_WARMUPS = (2, 3, 4)
CHOOSE_AT = (8, 16)  # budgets the choice must hold at
# "As accurate as sc@N": within this many points (one question of 64 wrong in one of 12
# orders moves the expected accuracy 0.13 points; sc@N's own figure is an estimate).
TOLERANCE = 0.5
REPORT_AT = (8, 16, 32)
PREVIOUS = ("low", None, 0.95, 2)  # the defaults before this benchmark (the paper's values)


@dataclass(frozen=True, slots=True)
class _Rule:
    """Settings as deepconf's defaults would apply them at any budget N: the warm-up is
    a quarter of N, at least ``min_warmup`` (strategies.sampling.deepconf's rule)."""

    variant: str
    round_size: int | None
    consensus: float
    min_warmup: int

    def at(self, n: int) -> OnlineConfig:
        warmup = default_warmup(n, self.min_warmup)
        return OnlineConfig(self.variant, warmup, self.round_size or warmup, self.consensus)

    @property
    def label(self) -> str:
        rounds = self.round_size or "the warm-up's size"
        return (
            f"{self.variant}, warm-up >= {self.min_warmup}, rounds of {rounds}, "
            f"consensus {self.consensus}"
        )


def _record_pools(
    questions: Sequence[Question], pool: int, seed: int
) -> list[list[tuple[list[float], int | None]]]:
    """Per question, ``pool`` traces: per-token confidences and the parsed answer."""
    from vllm import SamplingParams

    from core.token_confidence import token_confidence
    from testbed.engine import load_llm, to_completion
    from testbed.tokenizer import CharCodec, chat_prompt

    llm = load_llm(model_path("base"), seed=0)
    params = SamplingParams(
        n=pool,
        temperature=1.0,
        max_tokens=MAX_TOKENS,
        logprobs=TOP_K,
        seed=seed,
        skip_special_tokens=False,
    )
    outs = llm.generate([chat_prompt(q.prompt) for q in questions], params, use_tqdm=True)
    del llm
    codec = CharCodec()
    pools: list[list[tuple[list[float], int | None]]] = []
    for q, out in zip(questions, outs, strict=True):
        traces = []
        for o in out.outputs:
            confs = [
                token_confidence([lp.logprob for lp in pos.values()], TOP_K)
                for pos in o.logprobs or []
            ]
            traces.append((confs, to_completion(codec, q, o.token_ids).answer))
        pools.append(traces)
    return pools


def _rules() -> list[_Rule]:
    return [
        _Rule(v, r, c, w)
        for v, r, c, w in itertools.product(VARIANTS, ROUNDS, CONSENSUS, MIN_WARMUPS)
    ]


def _orders_for(
    pools: Sequence[Sequence[SimTrace]], repeats: int, seed: int
) -> list[list[list[int]]]:
    rng = random.Random(seed)
    out = []
    for pool in pools:
        per_q = []
        for _ in range(repeats):
            order = list(range(len(pool)))
            rng.shuffle(order)
            per_q.append(order)
        out.append(per_q)
    return out


@dataclass(frozen=True, slots=True)
class _Split:
    """One split's pools and random orders, and sc's curve on them (n = 1 .. the pool)."""

    pools: list[list[SimTrace]]
    golds: list[int]
    orders: list[list[list[int]]]
    sc: list[Point]

    @classmethod
    def of(cls, raw: Any, questions: Sequence[Question], repeats: int) -> _Split:
        pools = [[SimTrace.of(c, a, WINDOW) for c, a in pool] for pool in raw]
        golds = [q.answer for q in questions]
        orders = _orders_for(pools, repeats, seed=1)
        size = min(len(p) for p in pools)
        sc = [
            expected(pools, golds, orders, functools.partial(majority, n=n))
            for n in range(1, size + 1)
        ]
        return cls(pools, golds, orders, sc)

    def online(self, rule: _Rule, n: int) -> Point:
        cfg = rule.at(n)
        return expected(
            self.pools, self.golds, self.orders, lambda p, o: online(p, o, n, cfg, WINDOW)
        )

    def row(self, rule: _Rule, budgets: Sequence[int]) -> dict[str, Any]:
        """The rule at each budget: its point, and its tokens relative to sc@N and to
        what sc spends for the same accuracy (None: sc never gets there)."""
        curve = sorted(self.sc, key=lambda p: p.tokens)
        out: dict[str, Any] = {"label": rule.label, "rule": asdict(rule)}
        for n in budgets:
            pt = self.online(rule, n)
            same = tokens_at(curve, pt.accuracy)
            out[str(n)] = {
                **asdict(pt),
                "sc_accuracy": self.sc[n - 1].accuracy,
                "vs_sc_n": pt.tokens / self.sc[n - 1].tokens,
                "vs_sc_equal": pt.tokens / same if same else None,
            }
        return out


def _admissible(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules as accurate as sc@N (within TOLERANCE) at every budget of CHOOSE_AT,
    fewest tokens relative to sc@N (mean over CHOOSE_AT) first: the first is chosen."""
    ok = [
        r
        for r in rows
        if all(r[str(n)]["accuracy"] >= r[str(n)]["sc_accuracy"] - TOLERANCE for n in CHOOSE_AT)
    ]
    return sorted(ok, key=lambda r: sum(r[str(n)]["vs_sc_n"] for n in CHOOSE_AT))


def _cells(row: dict[str, Any], budgets: Sequence[int]) -> str:
    cells = []
    for n in budgets:
        c = row[str(n)]
        equal = f"{c['vs_sc_equal']:.2f}x" if c["vs_sc_equal"] else "beyond sc"
        cells.append(
            f"{c['accuracy']:.1f} (sc {c['sc_accuracy']:.1f}) | {c['tokens']:.0f} | "
            f"{c['vs_sc_n']:.2f}x | {equal}"
        )
    return " | ".join(cells)


def _header(budgets: Sequence[int]) -> list[str]:
    cols = "".join(
        f" N={n} acc % | N={n} tokens | vs sc@{n} | vs sc at equal acc |" for n in budgets
    )
    return ["| setting |" + cols, "|---|" + "---|---|---|---|" * len(budgets)]


def _report(args: argparse.Namespace, out: dict[str, Any], seconds: float) -> str:
    val, test = out["validation"], out["test"]
    lines = [
        "# DeepConf settings: chosen on validation, checked on test (thinkgate bench "
        "confidence-grid)",
        "",
        f"Machine: {machine()}. Command: `.venv/bin/python -m benchmarks.confidence_grid "
        f"--questions {args.questions} --pool {args.pool} --orders {args.orders}`; "
        f"recording the pools (vLLM, in process) took {(out['record_s'] or 0) / 60:.1f} min, "
        f"the replays {seconds:.0f} s. Testbed `base`, {args.questions} validation and "
        f"{args.questions} test questions, 9-12 operations, temperature 1; per question one "
        f"pool of {args.pool} traces (top-{TOP_K} confidences, window {WINDOW}), DeepConf "
        f"online replayed over {args.orders} random orders of each pool "
        "(`benchmarks/deepconf_sim.py`, which follows `strategies/sampling/deepconf.py`); accuracy "
        "is the expected share right over those orders, tokens the mean generated per "
        "question (stopped and aborted traces included).",
        "",
        f"Settings tried, as defaults at any budget N (warm-up ceil(N/4), at least "
        f"{'/'.join(map(str, MIN_WARMUPS))}): variant {'/'.join(VARIANTS)}, round size 1 / 2 / "
        f"the warm-up's, consensus {CONSENSUS}. Chosen on validation: the fewest tokens "
        f"relative to sc@N (mean over N = {', '.join(map(str, CHOOSE_AT))}) among the "
        f"settings as accurate as sc@N (within {TOLERANCE} points) at each of those N. "
        "`vs sc@N`: tokens / sc@N's tokens (the paper's comparison, same budget); "
        "`vs sc at equal acc`: tokens / the tokens sc needs for the same accuracy on its "
        "own curve (n = 1..pool, linear between budgets), the stricter one.",
        "",
        "## Self-consistency on the same pools",
        "",
        "| n | validation acc % | validation tokens | test acc % | test tokens |",
        "|---|---|---|---|---|",
    ]
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32):
        if n <= len(val["sc"]):
            v, t = val["sc"][n - 1], test["sc"][n - 1]
            lines.append(
                f"| {n} | {v['accuracy']:.1f} | {v['tokens']:.0f} | {t['accuracy']:.1f} | "
                f"{t['tokens']:.0f} |"
            )
    lines += ["", "## Test (never used for the choice)", "", *_header(REPORT_AT)]
    for row in out["test_rows"]:
        lines.append(f"| {row['label']} | {_cells(row, REPORT_AT)} |")
    lines += ["", "## Validation: the ten best admissible settings, then the previous defaults", ""]
    lines += _header(CHOOSE_AT)
    for row in out["validation_best"]:
        lines.append(f"| {row['label']} | {_cells(row, CHOOSE_AT)} |")
    return "\n".join(lines) + "\n"


def plot(out: dict[str, Any], path: Any) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    colours = {r["label"]: f"C{i}" for i, r in enumerate(out["test_rows"])}
    for ax, name in zip(axes, ("validation", "test"), strict=True):
        sc = out[name]["sc"]
        ax.plot([p["tokens"] for p in sc], [p["accuracy"] for p in sc], "k.-", label="sc@n")
        rows = out["validation_rows"] if name == "validation" else out["test_rows"]
        if name == "validation":
            ax.scatter(
                [r[str(n)]["tokens"] for r in rows for n in CHOOSE_AT],
                [r[str(n)]["accuracy"] for r in rows for n in CHOOSE_AT],
                s=5,
                alpha=0.3,
                color="grey",
                label="settings tried (N=8, 16)",
            )
            rows = [r for r in rows if r["label"] in colours]
        for r in rows:
            budgets = [n for n in REPORT_AT if str(n) in r]
            ax.plot(
                [r[str(n)]["tokens"] for n in budgets],
                [r[str(n)]["accuracy"] for n in budgets],
                marker="o",
                color=colours[r["label"]],
                label=r["label"],
            )
        ax.set_title(f"{name}: deepconf settings vs sc@n")
        ax.set_xlabel("generated tokens per question (mean)")
        ax.set_ylabel("accuracy (%, expected over orders)")
        ax.set_xscale("log")
        ticks = [250, 500, 1000, 2000, 4000]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_ylim(90, 100.5)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=64, help="per split")
    parser.add_argument("--pool", type=int, default=32, help="traces per question")
    parser.add_argument("--orders", type=int, default=12, help="random orders per pool")
    parser.add_argument("--cache", type=Path, default=LOGS / "confidence-grid-pools.json")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.pool < max(CHOOSE_AT):
        parser.error(f"--pool must hold the largest budget chosen at ({max(CHOOSE_AT)})")
    questions = {
        "validation": make_questions("validation", args.questions, seed=11, min_ops=9, max_ops=12),
        "test": make_questions("test", args.questions, seed=3, min_ops=9, max_ops=12),
    }
    key = f"{args.questions}/{args.pool}"
    saved = json.loads(args.cache.read_text()) if args.cache.exists() else {}
    if saved.get("key") != key:
        saved = {"key": key}
        t_record = time.perf_counter()
        for name, qs in questions.items():
            saved[name] = _record_pools(qs, args.pool, seed=7 if name == "test" else 5)
        saved["record_s"] = time.perf_counter() - t_record
        args.cache.parent.mkdir(parents=True, exist_ok=True)
        args.cache.write_text(json.dumps(saved))
    t0 = time.perf_counter()
    val = _Split.of(saved["validation"], questions["validation"], args.orders)
    test = _Split.of(saved["test"], questions["test"], args.orders)
    from tqdm import tqdm

    budgets = [n for n in REPORT_AT if n <= args.pool]
    rows = [val.row(r, CHOOSE_AT) for r in tqdm(_rules(), desc="settings (validation)")]
    ok = _admissible(rows)
    pick = ok[0] if ok else None
    previous = _Rule(*PREVIOUS)
    shown = [_Rule(**r["rule"]) for r in ([pick] if pick else [])]
    # The consensus is the dial between tokens and accuracy: the chosen setting at 0.8.
    shown += [replace(rule, consensus=0.8) for rule in shown[:1] if rule.consensus != 0.8]
    shown += [previous, _Rule("high", None, 0.95, 2)]
    out: dict[str, Any] = {
        "validation": {"sc": [asdict(p) for p in val.sc]},
        "test": {"sc": [asdict(p) for p in test.sc]},
        "chosen": pick,
        "record_s": saved.get("record_s"),
        "validation_rows": rows,
        "validation_best": ok[:10] + [r for r in rows if _Rule(**r["rule"]) == previous],
        "test_rows": [test.row(r, budgets) for r in shown],
    }
    seconds = time.perf_counter() - t0
    text = _report(args, out, seconds)
    (RESULTS / "confidence-grid.md").write_text(text)
    (RESULTS / "confidence-grid.json").write_text(json.dumps(out, indent=1))
    plot(out, RESULTS / "confidence-grid.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
