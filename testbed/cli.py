"""`thinkgate testbed ...` / `python -m testbed ...`: train and evaluate the testbed models."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from testbed import MODELS_DIR


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="thinkgate testbed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train testbed models (CPU) and export them")
    train.add_argument("--variant", choices=["base", "elastic", "reward", "all"], default="all")
    train.add_argument("--minutes", type=float, default=None, help="wall-clock cap per variant")
    train.add_argument("--max-steps", type=int, default=None)
    train.add_argument("--out", type=Path, default=MODELS_DIR, help="parent of the model dirs")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--base", type=Path, default=None, help="base model dir to start from")
    train.add_argument("--no-progress", action="store_true")

    ev = sub.add_parser("eval", help="evaluate a model through the vLLM engine")
    ev.add_argument("--model", type=Path, default=MODELS_DIR / "base")
    ev.add_argument("--n", type=int, default=120, help="test questions per run")
    ev.add_argument("--samples", type=int, default=16, help="samples per question (T=1.0)")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--cut", action="store_true", help="also run the thinking-cut curve")
    ev.add_argument("--reward", type=Path, default=None, help="also score a reward model")
    ev.add_argument("--json", type=Path, default=None, help="write the report here")
    ev.add_argument("--card", action="store_true", help="merge the report into card.json")
    return parser


DEFAULT_MINUTES = {"base": 22.0, "elastic": 7.0, "reward": 6.0}


def _display(path: Path) -> Path:
    """`path` relative to the working directory when inside it (cards stay portable)."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _train(args: argparse.Namespace) -> int:
    from testbed.data import Variant
    from testbed.model import read_card, write_card
    from testbed.train import TrainSettings, settings_dict, train_causal

    variants = ["base", "elastic", "reward"] if args.variant == "all" else [args.variant]
    out: Path = args.out
    for variant in variants:
        minutes = args.minutes if args.minutes is not None else DEFAULT_MINUTES[variant]
        target = out / variant
        base_dir = _display(args.base if args.base is not None else out / "base")
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if variant == "reward":
            from testbed.reward import RewardSettings, train_reward

            rsettings = RewardSettings(seed=args.seed, minutes=minutes, base=str(base_dir))
            if args.max_steps is not None:
                rsettings = replace(rsettings, max_steps=args.max_steps)
            rresult = train_reward(rsettings, target, progress_bar=not args.no_progress)
            card: dict[str, object] = {"training": {**rresult.as_dict(), "started": started}}
        else:
            causal: Variant = "base" if variant == "base" else "elastic"
            settings = TrainSettings(variant=causal, seed=args.seed, minutes=minutes)
            if args.max_steps is not None:
                settings = replace(settings, max_steps=args.max_steps)
            if causal == "elastic":
                # Fine-tuning from base: a lower peak rate and a short warm-up.
                settings = replace(settings, init_from=str(base_dir), lr=1e-3, warmup_steps=20)
            result = train_causal(settings, target, progress_bar=not args.no_progress)
            card = {
                "training": {
                    "settings": settings_dict(settings),
                    "steps": result.steps,
                    "tokens": result.tokens,
                    "wall_s": round(result.wall_s, 1),
                    "final_loss_ema": round(result.final_loss, 5),
                    "started": started,
                }
            }
        card["model"] = variant
        card["host"] = {"python": platform.python_version(), "machine": platform.machine()}
        old = read_card(target)
        old.pop("status", None)
        for stale in ("eval", "vs_base_under_cut"):  # numbers of the previous weights
            old.pop(stale, None)
        write_card(target, {**old, **card})
        print(json.dumps(card["training"], indent=2, default=str))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    raw = list(argv) if argv is not None else sys.argv[1:]
    args = _parser().parse_args(raw)
    args.argv_for_card = ["python", "-m", "testbed", *raw]
    if args.command == "train":
        return _train(args)
    if args.command == "eval":
        from testbed.evaluate import run_eval_command

        return run_eval_command(args)
    return 2
