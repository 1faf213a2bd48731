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
from typing import TYPE_CHECKING

from testbed import MODELS_DIR

if TYPE_CHECKING:
    from testbed.train import TrainResult, TrainSettings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="thinkgate testbed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train testbed models (CPU) and export them")
    train.add_argument(
        "--variant",
        choices=["base", "base-focus", "elastic", "reward", "all"],
        default="all",
        help="base = from scratch, then the focus phase; base-focus = only the focus phase, "
        "fine-tuning the existing base in place",
    )
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


DEFAULT_MINUTES = {"base": 22.0, "base-focus": 5.0, "elastic": 7.0, "reward": 6.0}
# The focus phase: merged lines' result digit weighs 8x (a plain loss left them 44% right
# when sampled) and a tenth of the traces check every step, greedy's own length.
MERGE_WEIGHT = 8.0
THOROUGH_SHARE = 0.1


def _display(path: Path) -> Path:
    """`path` relative to the working directory when inside it (cards stay portable)."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _causal_record(settings: TrainSettings, result: TrainResult, started: str) -> dict[str, object]:
    from testbed.train import settings_dict

    record: dict[str, object] = {
        "settings": settings_dict(settings),
        "steps": result.steps,
        "tokens": result.tokens,
        "wall_s": round(result.wall_s, 1),
        "final_loss_ema": round(result.final_loss, 5),
        "started": started,
    }
    if result.merged_result_prob is not None:
        record["merged_result_prob_ema"] = round(result.merged_result_prob, 4)
    return record


def _phases(training: object) -> list[dict[str, object]]:
    """The training records already on a base card (one, or a list of phases)."""
    if not isinstance(training, dict):
        return []
    phases = training.get("phases")
    return list(phases) if isinstance(phases, list) else [training]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _train_base(args: argparse.Namespace, target: Path, *, scratch: bool) -> dict[str, object]:
    """`base`: from scratch (unless only the focus phase runs), then the focus phase."""
    from testbed.model import read_card
    from testbed.train import TrainSettings, train_causal

    phases: list[dict[str, object]] = []
    if scratch:
        started = _now()
        settings = TrainSettings(variant="base", seed=args.seed, minutes=_minutes(args, "base"))
        settings = _capped(settings, args)
        phases.append(
            _causal_record(
                settings, train_causal(settings, target, progress_bar=not args.no_progress), started
            )
        )
    else:
        phases = _phases(read_card(target).get("training"))[:1]
    started = _now()
    focus = TrainSettings(
        variant="base",
        seed=args.seed + 1,  # a fresh draw of examples, not phase one's first ones again
        minutes=_minutes(args, "base-focus"),
        init_from=str(_display(target)),
        lr=1e-3,
        warmup_steps=20,
        merge_weight=MERGE_WEIGHT,
        thorough_share=THOROUGH_SHARE,
    )
    focus = _capped(focus, args)
    result = train_causal(focus, target, progress_bar=not args.no_progress)
    phases.append(_causal_record(focus, result, started))

    def total(key: str) -> float:
        return sum(float(str(p.get(key, 0))) for p in phases)

    return {
        "phases": phases,
        "steps": int(total("steps")),
        "tokens": int(total("tokens")),
        "wall_s": round(total("wall_s"), 1),
    }


def _minutes(args: argparse.Namespace, phase: str) -> float:
    return float(args.minutes) if args.minutes is not None else DEFAULT_MINUTES[phase]


def _capped(settings: TrainSettings, args: argparse.Namespace) -> TrainSettings:
    return settings if args.max_steps is None else replace(settings, max_steps=args.max_steps)


def _train(args: argparse.Namespace) -> int:
    from testbed.model import read_card, write_card
    from testbed.train import TrainSettings, train_causal

    variants = ["base", "elastic", "reward"] if args.variant == "all" else [args.variant]
    out: Path = args.out
    for variant in variants:
        name = "base" if variant == "base-focus" else variant
        target = out / name
        base_dir = _display(args.base if args.base is not None else out / "base")
        started = _now()
        training: dict[str, object]
        if variant == "reward":
            from testbed.reward import RewardSettings, train_reward

            rsettings = RewardSettings(
                seed=args.seed, minutes=_minutes(args, "reward"), base=str(base_dir)
            )
            if args.max_steps is not None:
                rsettings = replace(rsettings, max_steps=args.max_steps)
            rresult = train_reward(rsettings, target, progress_bar=not args.no_progress)
            training = {**rresult.as_dict(), "started": started}
        elif name == "base":
            training = _train_base(args, target, scratch=variant == "base")
        else:
            # Fine-tuning from base: a lower peak rate, a short warm-up, base's focus weight.
            settings = TrainSettings(
                variant="elastic",
                seed=args.seed,
                minutes=_minutes(args, "elastic"),
                init_from=str(base_dir),
                lr=1e-3,
                warmup_steps=20,
                merge_weight=MERGE_WEIGHT,
            )
            settings = _capped(settings, args)
            result = train_causal(settings, target, progress_bar=not args.no_progress)
            training = _causal_record(settings, result, started)
        card: dict[str, object] = {"training": training, "model": name}
        card["host"] = {"python": platform.python_version(), "machine": platform.machine()}
        old = read_card(target)
        old.pop("status", None)
        for stale in ("eval", "vs_base_under_cut"):  # numbers of the previous weights
            old.pop(stale, None)
        write_card(target, {**old, **card})
        print(json.dumps(training, indent=2, default=str))
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
