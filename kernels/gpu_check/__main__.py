"""``python -m kernels.gpu_check [--out DIR] [--device cpu --interpret]``.

Exit status: 0 all checks passed; 1 a correctness check failed; 3 skipped, no CUDA device
(``scripts/gpu-check.sh`` turns 3 into 0 after printing "skipped: no CUDA device").
``--device cpu --interpret`` runs the same code paths in Triton's interpreter on small
shapes (to test the harness without a GPU; timings are then meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from kernels.gpu_check.checks import Result
    from kernels.gpu_check.timing import Timing

SKIPPED = 3


def _progress(msg: str, t0: float) -> None:
    print(f"[gpu-check {time.monotonic() - t0:6.1f}s] {msg}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results", help="directory for gpu-check.{md,json}")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument(
        "--interpret", action="store_true", help="TRITON_INTERPRET=1 (with --device cpu)"
    )
    ap.add_argument("--no-timings", action="store_true")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    refused = _refusal(args)
    if refused is not None:
        return refused
    import torch

    from kernels.gpu_check.vllm_standin import install

    standin = install()
    t0 = time.monotonic()
    device = torch.device(args.device)
    name = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter)"
    )
    _progress(f"device: {name}; vLLM {'stand-ins' if standin else 'installed'}", t0)
    quick = args.interpret
    results = _run_checks(_steps(device, quick), t0)
    timings: list[Timing] = []
    peak_source = ""
    if not args.no_timings:
        timings, peak_source = _run_timings(device, name, quick, t0)
    failed = [r for r in results if not r.ok]
    out = Path(args.out)
    text = _write_report(out, name, results, timings, peak_source)
    print(text)
    _progress(
        f"{len(results) - len(failed)}/{len(results)} checks passed; wrote {out}/gpu-check.md", t0
    )
    return 1 if failed else 0


def _refusal(args: argparse.Namespace) -> int | None:
    """The exit status when the check cannot run as asked (None: it can). Sets
    ``TRITON_INTERPRET`` for ``--interpret`` before torch (and so Triton) is imported."""
    if args.interpret:
        if args.device != "cpu":
            print("--interpret needs --device cpu", file=sys.stderr)
            return 2
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA device (torch.cuda.is_available() is False)", flush=True)
        return SKIPPED
    if args.device == "cpu" and not args.interpret:
        print("--device cpu needs --interpret (Triton has no CPU backend)", file=sys.stderr)
        return 2
    return None


def _steps(device: torch.device, quick: bool) -> list[tuple[str, Callable[[], Any]]]:
    """The correctness checks, labelled; ``quick``: the interpreter's small shapes.
    Each reads its check from ``checks`` when it runs (tests replace some)."""
    from kernels.gpu_check import checks

    big = 4099 if quick else checks.LARGE_VOCAB
    mask_shapes = (
        [(1, big), (3, 2049), (5, 1000)]
        if quick
        else [(1, big), (3, 2049), (8, 32000), (64, big), (256, big)]
    )
    gamma_shapes = [(1, 300), (3, 1025)] if quick else [(1, big), (4, 2049), (8, 32000), (16, big)]
    return [
        ("elastic mask (Triton vs torch)", lambda: checks.check_elastic_mask(device, mask_shapes)),
        (
            "elastic track (Triton vs torch)",
            lambda: checks.check_elastic_track(device, 4 if quick else 40),
        ),
        ("gamma reweight (Triton vs torch)", lambda: checks.check_gamma(device, gamma_shapes)),
        ("elastic V2 adapter", lambda: checks.check_elastic_v2(device, 300 if quick else big)),
        (
            "confidence V2 adapter",
            lambda: checks.check_confidence_v2(device, 300 if quick else big),
        ),
        ("guidance V2 adapter", lambda: checks.check_guidance_v2(device, 300 if quick else 32000)),
    ]


def _run_checks(steps: list[tuple[str, Callable[[], Any]]], t0: float) -> list[Result]:
    """Every step's result; a step that raises is a failed check, and the others run."""
    from kernels.gpu_check import checks

    results = []
    for label, run in steps:
        _progress(f"{label} ...", t0)
        try:
            res = run()
        except Exception as exc:  # a crash is a failed check, and the others still run
            res = checks.Result(label, False, f"raised {type(exc).__name__}: {exc}")
        results.append(res)
        _progress(f"{'PASS' if res.ok else 'FAIL'} {res.name}: {res.detail}", t0)
    return results


def _run_timings(
    device: torch.device, name: str, quick: bool, t0: float
) -> tuple[list[Timing], str]:
    """The kernels' timings against the device's peak bandwidth, and where that peak
    came from."""
    from kernels.gpu_check import bench

    timings = []
    _progress("timings ...", t0)
    peak, peak_source = bench.peak_bandwidth(device, name)
    _progress(f"peak bandwidth {peak / 1e12:.2f} TB/s ({peak_source})", t0)
    for label, fn in bench.cases(device, quick):
        t = fn(peak)
        timings.append(t)
        _progress(
            f"{label}: {t.median_us:.1f} us, {t.achieved_gbps:.0f} GB/s, "
            f"floor {t.floor_us:.2f} us ({t.of_floor:.0%})",
            t0,
        )
    return timings, peak_source


def _write_report(
    out: Path, name: str, results: list[Result], timings: list[Timing], peak_source: str
) -> str:
    """Writes ``gpu-check.md`` and ``gpu-check.json`` under ``out``; the markdown."""
    import torch

    from kernels.gpu_check.timing import markdown_table

    out.mkdir(parents=True, exist_ok=True)
    md = [f"# GPU check: {name}", "", f"torch {torch.__version__}", ""]
    md += ["## Correctness", "", "| check | result | detail |", "|---|---|---|"]
    md += [f"| {r.name} | {'PASS' if r.ok else 'FAIL'} | {r.detail} |" for r in results]
    if timings:
        md += ["", f"## Timings (peak {peak_source})", "", markdown_table(timings)]
    text = "\n".join(md) + "\n"
    (out / "gpu-check.md").write_text(text)
    (out / "gpu-check.json").write_text(
        json.dumps(
            {
                "device": name,
                "results": [r.__dict__ for r in results],
                "peak": peak_source,
                "timings": [t.row() for t in timings],
            },
            indent=2,
        )
    )
    return text


def cli(argv: list[str]) -> int:
    """``thinkgate gpu-check``: as ``scripts/gpu-check.sh``, no CUDA device is not a failure."""
    code = main(argv)
    return 0 if code == SKIPPED else code


if __name__ == "__main__":
    sys.exit(main())
