"""``thinkgate fit``: fit the planners to a model and a workload, and judge the fit once.

    thinkgate fit --workload FILE [--model DIR | --server URL] [--out DIR] [--minutes 30]
    thinkgate fit --workload FILE --out DIR --judge [--model DIR | --server URL]

The workload (``server.calibrate.workload``) is split by a hash of each question into a
fit part and a test part (``server.calibrate.split``). On the fit part the run measures
the decode speed alone and in a crowd and the answer's length (the deadline's reserve),
which strategies the server runs, then ``auto``'s rows (``server.calibrate.fit_cells``)
as many as ``--minutes`` affords at ``--min-questions`` each, and writes the profile
(``--out``: ``profile.json``, ``auto-table.json``, ``report.md``, a plot) that
``thinkgate serve --profile DIR`` plans from. Killed, it resumes from its journal when
run again with the same ``--out``. ``--judge`` runs the test part once
(``server.calibrate.judge``).

Without ``--server`` a server is started on ``--model`` (default: the installed default
model) and stopped after; its log goes to a temporary file named on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from server.calibrate import fit_pets, fit_predictor, fit_run, fit_stop
from server.calibrate.fit_cells import Schedule, Speeds, all_cells
from server.calibrate.fit_journal import Journal, save_schedule, saved_schedule
from server.calibrate.fit_profile import Fitted, code_version, write
from server.calibrate.graders import Grader, GraderError
from server.calibrate.local_server import machine
from server.calibrate.plans import CROWDS, DEADLINES
from server.calibrate.split import record, split
from server.calibrate.workload import Fields, Workload, WorkloadError, read_workload


class FitError(RuntimeError):
    """A fit that cannot go on: the message says why and what to do."""


async def fitting(client: Any, args: argparse.Namespace, workload: Workload) -> Fitted:
    """The measurements through ``client`` (an ``openai.AsyncOpenAI`` on the server),
    the profile's contents."""
    from tqdm import tqdm

    t0 = time.monotonic()
    code = code_version()  # at the start: the checkout may change while it runs
    model, tokenizer = await served(client)
    fit, test = split(workload.questions, args.test_share)
    if not fit:
        raise FitError("the fit part is empty: more questions, or a smaller --test-share")
    journal = Journal(args.out)
    bar = tqdm(total=0, desc="fit", unit="q", file=sys.stderr)
    run = fit_run.Run(client, model, tuple(fit), journal, args.seed, t0 + args.minutes * 60, bar)
    try:
        sched, speeds, refused = await _scheduled(run, args, workload)
        qs = list(fit[: sched.questions])
        bar.total += len(qs) * (len(sched.cells) + (1 if workload.label_free else 0))
        if workload.label_free:
            qs = await fit_run.consensus(run, qs)
        complete = await fit_run.rounds(run, sched.cells, qs, speeds)
        done = fit_run.finished(run, sched.cells, qs)
        rows = tuple(fit_run.row(run, c, done) for c in sched.cells)
        pets = await _pets(run, args, qs if workload.label_free else list(fit), speeds)
        stop = _stop(args.out)
    finally:
        bar.close()
        journal.close()
    if not done:
        raise FitError("no question finished every cell: give --minutes more time")
    return Fitted(
        name=args.name or args.out.resolve().name,
        model=model,
        tokenizer=tokenizer,
        workload=workload,
        split=record(fit, test, args.test_share),
        rows=rows,
        speeds=speeds,
        answer_reserve=fit_run.answer_reserve(run),
        pets=pets,
        stop=stop,
        questions=len(done),
        left_out=sched.left_out,
        refused=refused,
        complete=complete,
        minutes=args.minutes,
        took_s=time.monotonic() - t0,
        machine=machine(),
        seed=args.seed,
        code=code,
    )


async def _pets(
    run: fit_run.Run, args: argparse.Namespace, qs: Sequence[Any], speeds: Speeds
) -> fit_pets.PetsFit:
    """The PETS table on the pools the time left affords (what a resumed fit drew is
    read back from the profile directory)."""
    if (args.out / fit_pets.POOLS_FILE).exists():
        n = len(qs)
    else:
        n = fit_pets.affordable(max(0.0, run.ends_at - time.monotonic()), speeds, len(qs))
    fit_run.say(f"PETS: pools of {fit_pets.POOL} samples on {n} fit questions")
    return await fit_pets.fit_table(
        run.client,
        qs[:n],
        model=run.model,
        seed=args.seed,
        max_tokens=fit_run.sample_tokens(run),
        out=args.out,
    )


def _stop(out: Path) -> fit_stop.StopFit:
    """The stop rule's confidence, replayed on the PETS pools (the default without them)."""
    from strategies.pets.calibration.pools import load_pools

    cache = out / fit_pets.POOLS_FILE
    pools = [r.to_pool() for r in load_pools(cache)] if cache.exists() else []
    return fit_stop.fit_stop(pools)


def client_of(url: str, api_key: str) -> Any:
    import openai

    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=600)


async def served(client: Any) -> tuple[str, str]:
    """The served model's name and tokenizer fingerprint."""
    card = (await client.models.list()).data[0]
    tokenizer = (card.model_extra or {}).get("tokenizer_fingerprint")
    if not isinstance(tokenizer, str):
        raise FitError(f"{client.base_url} is not a thinkgate server (no tokenizer fingerprint)")
    return card.id, tokenizer


async def _scheduled(
    run: fit_run.Run, args: argparse.Namespace, workload: Workload
) -> tuple[Schedule, Speeds, dict[str, str]]:
    """The schedule a killed run chose (resumed), or a new one after the probe."""
    key = {"workload_sha256": workload.sha256, "test_share": args.test_share, "seed": args.seed}
    saved = saved_schedule(args.out)
    cells = {c.key: c for c in all_cells(args.deadlines, args.clients)}
    if saved is not None:
        if {k: saved.get(k) for k in key} != key:
            raise FitError(
                f"{args.out} holds a fit of another workload, split or seed: a new --out"
            )
        fit_run.say(f"resuming the fit in {args.out}")
        sched = Schedule(
            tuple(cells[k] for k in saved["cells"]),
            int(saved["questions"]),
            float(saved["seconds"]),
            tuple(cells[k] for k in saved["left_out"] if k in cells),
        )
        return sched, Speeds(**saved["speeds"]), dict(saved["refused"])
    speeds = await fit_run.probe(run)
    refused = await fit_run.runnable(run, list(cells.values()))
    sched = fit_run.plan_cells(
        speeds,
        refused,
        # What the rows leave is the PETS pools' (fit_pets.SHARE of the time at least).
        seconds=max(0.0, run.ends_at - time.monotonic()) * (1 - fit_pets.SHARE),
        available=len(run.fit),
        min_questions=args.min_questions,
        deadlines=args.deadlines,
        crowds=args.clients,
        label_free=workload.label_free,
    )
    save_schedule(
        args.out,
        {
            **key,
            "cells": [c.key for c in sched.cells],
            "questions": sched.questions,
            "seconds": sched.seconds,
            "left_out": [c.key for c in sched.left_out],
            "speeds": asdict(speeds),
            "refused": refused,
        },
    )
    fit_run.say(
        f"{len(sched.cells)} cells x {sched.questions} questions, about "
        f"{sched.seconds / 60:.1f} min; left out for time: {len(sched.left_out)} cells"
    )
    return sched, speeds, refused


def _floats(raw: str) -> tuple[float, ...]:
    values = tuple(float(x) for x in raw.split(",") if x.strip())
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError("positive numbers separated by commas")
    return values


def _ints(raw: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in raw.split(",") if x.strip())
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("positive integers separated by commas")
    return values


def _ceilings(raw: str) -> tuple[int, ...]:
    # "none": a judgment at the deadlines only (all of a model without think tags' fixed
    # plans then run at every budget, so auto is held against each across the budgets).
    return () if raw.strip() == "none" else _ints(raw)


def _grader(raw: str) -> Grader:
    try:
        return Grader.parse(json.loads(raw) if raw.startswith("{") else raw)
    except (GraderError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thinkgate fit", description=(__doc__ or "").split("\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--server", default=None, help="URL of a running thinkgate server")
    src.add_argument("--model", default=None, help="model directory or id to start a server on")
    p.add_argument("--api-key", default="x", help="the server's key, where it has keys")
    p.add_argument("--workload", type=Path, required=True, help="JSONL questions")
    p.add_argument("--out", type=Path, default=Path("profile"), help="the profile directory")
    p.add_argument("--name", default=None, help="the profile's name (default: --out's name)")
    p.add_argument("--minutes", type=float, default=30.0, help="the fit's time")
    p.add_argument("--min-questions", type=int, default=40, help="fit questions per row, at least")
    p.add_argument("--test-share", type=float, default=0.5, help="share held out for --judge")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadlines", type=_floats, default=DEADLINES, help="seconds, comma-separated")
    p.add_argument("--clients", type=_ints, default=CROWDS, help="requests in flight per cell")
    p.add_argument("--max-model-len", type=int, default=None, help="the started server's context")
    p.add_argument("--prompt-field", default="prompt")
    p.add_argument("--answer-field", default="answer")
    p.add_argument("--answer-after", default=None, help="the answer follows this marker (####)")
    p.add_argument("--choices-field", default=None, help="a list of options, lettered A, B, ...")
    p.add_argument("--grader", type=_grader, default=Grader(), help="math|number|choice|exact|JSON")
    p.add_argument(
        "--predictor-traces",
        type=int,
        default=400,
        help="traces the budget predictor is trained on (0: no predictor)",
    )
    p.add_argument(
        "--predictor-minutes", type=float, default=3.0, help="the predictor's training time"
    )
    p.add_argument("--judge", action="store_true", help="run the test part once (after a fit)")
    p.add_argument("--limit", type=int, default=None, help="--judge: the first N test questions")
    p.add_argument(
        "--ceilings",
        type=_ceilings,
        default=(300, 1000),
        help="--judge: token ceilings to judge at (none: the deadlines only)",
    )
    p.add_argument(
        "--judge-plans",
        type=int,
        default=None,
        help="--judge: the fit's N best fixed plans per budget (default: every one measured)",
    )
    return p


def _workload(p: argparse.ArgumentParser, args: argparse.Namespace) -> Workload:
    fields = Fields(
        prompt=args.prompt_field,
        answer=args.answer_field,
        answer_after=args.answer_after,
        choices=args.choices_field,
        grader=args.grader,
    )
    try:
        return read_workload(args.workload, fields)
    except WorkloadError as exc:
        p.error(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    from server.calibrate.fit_server import serving

    p = parser()
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.min_questions < 1 or args.minutes <= 0 or not 0 < args.test_share < 1:
        p.error("--min-questions >= 1, --minutes > 0, 0 < --test-share < 1")
    workload = _workload(p, args)
    try:
        if args.judge:
            from server.calibrate.judge import judging
            from strategies.profile import Profile, ProfileError

            try:
                Profile.load(args.out)  # before a server starts on it
            except ProfileError as exc:
                raise FitError(f"--judge needs a fitted profile in --out: {exc}") from exc

            with serving(args, profile=args.out) as url:
                print(asyncio.run(judging(client_of(url, args.api_key), args, workload)))
            return 0
        with serving(args, profile=None) as url:
            fitted = asyncio.run(fitting(client_of(url, args.api_key), args, workload))
    except RuntimeError as exc:  # FitError, or a server that would not start (its log named)
        print(f"thinkgate fit: {exc}", file=sys.stderr)
        return 2
    write(args.out, fitted)
    predictor = _predictor(args, fitted)
    print(f"wrote {args.out}/ ({len(fitted.rows)} rows x {fitted.questions} questions)")
    if predictor.failed:
        print(f"thinkgate fit: the budget predictor: {predictor.reason}", file=sys.stderr)
    return 1 if predictor.failed else 0


def _predictor(args: argparse.Namespace, fitted: Fitted) -> fit_predictor.PredictorFit:
    """Budget guidance's predictor on the fit part's prompts (after the server stopped)."""
    from server.calibrate.fit_server import model_of

    fit_ids = set(fitted.split.fit_ids)
    prompts = fit_predictor.write_prompts(
        args.out, [q for q in fitted.workload.questions if q.id in fit_ids]
    )
    model = None if args.server else model_of(args)
    why = "--predictor-traces 0" if args.predictor_traces == 0 else None
    why = why or fit_predictor.why_not(model, fitted.refused)
    if why is not None or model is None:
        out = fit_predictor.PredictorFit(False, why)
    else:
        out = fit_predictor.train(
            model,
            args.out,
            prompts,
            traces=args.predictor_traces,
            minutes=args.predictor_minutes,
            seed=args.seed,
        )
    fit_predictor.record(args.out, out)
    return out
