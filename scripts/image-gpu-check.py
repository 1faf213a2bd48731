"""What can be checked inside the GPU image on a machine without a GPU (scripts/image-gpu.sh).

Run with the image's own Python, from /opt/thinkgate. Prints one Markdown table row per
check (``| check | result |``) and exits 1 when any check failed, 0 otherwise:

* the versions: vLLM at the ``gpu`` extra's pin, torch a CUDA build, Triton present;
* thinkgate's packages import beside that vLLM;
* every processor class loads through the loader of the runner it is for (vLLM's V1
  loader, Model Runner V2's loader), and V2's loader refuses a V1 class (why each spec
  names two classes);
* vLLM's general plugins (ours among them) load, and the budget-guidance wrapper
  architecture is then registered;
* the command ``thinkgate replica`` would run on a GPU is accepted by that vLLM's own
  server parser (every flag we add exists in this release).

    python3 image-gpu-check.py PINNED_VLLM_VERSION
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

failed: list[str] = []


def row(name: str, check: Callable[[], str]) -> None:
    try:
        result = check()
    except Exception as exc:  # a failed check is a row, the others still run
        failed.append(name)
        last = traceback.format_exception_only(exc)[-1].strip()
        result = f"FAILED: {last[:160]}"
    print(f"| {name} | {result.replace('|', '/')} |", flush=True)


def versions(pinned: str) -> str:
    import torch
    import triton
    import vllm

    if vllm.__version__ != pinned:
        raise AssertionError(f"vllm {vllm.__version__}, pinned {pinned}")
    if torch.version.cuda is None:
        raise AssertionError(f"torch {torch.__version__} is not a CUDA build")
    return (
        f"vllm {vllm.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"triton {triton.__version__}; CUDA device here: {torch.cuda.is_available()}"
    )


def our_packages() -> str:
    import importlib

    names = ["server.app", "engines.local.engine", "engines.remote.engine", "strategies.plain"]
    for name in names:
        importlib.import_module(name)
    return ", ".join(names)


def processors() -> str:
    from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns
    from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs_by_fqcns

    from kernels.processors import SPECS

    v1 = _load_logitsprocs_by_fqcns([s.v1 for s in SPECS])
    v2 = _load_v2_logitsprocs_by_fqcns([s.v2 for s in SPECS])
    try:
        _load_v2_logitsprocs_by_fqcns([SPECS[0].v1])
    except ValueError:
        pass
    else:
        raise AssertionError("Model Runner V2's loader took a V1 class")
    names = ", ".join(s.name for s in SPECS)
    return f"{names}: {len(v1)} V1 and {len(v2)} V2 classes loaded; V2 refuses V1"


def plugins() -> str:
    from vllm import ModelRegistry
    from vllm.plugins import load_general_plugins

    from kernels.guidance.plugin import ARCHITECTURE as ARCH

    load_general_plugins()
    if ARCH not in ModelRegistry.get_supported_archs():
        raise AssertionError(f"{ARCH} not registered")
    return f"{ARCH} registered"


def replica_command() -> str:
    # vLLM's parser computes its defaults from the platform, which it cannot find without
    # a GPU, and CUDA's needs the driver's library: the CPU platform stands in for the
    # defaults. The flags, and what they accept, are this (CUDA) build's.
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from engines.local.replica import build_command

    cmd = build_command(None, [], runner="v2", cpu=False)
    args = cmd[cmd.index("-m") + 2 :]
    parser = make_arg_parser(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    parsed = parser.parse_args(args)
    validate_parsed_serve_args(parsed)
    try:  # the parse can fail: a flag this release does not have is refused
        parser.parse_args([*args, "--thinkgate-no-such-flag"])
    except SystemExit:
        pass
    else:
        raise AssertionError("vLLM's parser took an unknown flag")
    flags = [a for a in args if a.startswith("--")]
    return f"{len(flags)} flags parsed: {' '.join(flags)}"


def main() -> int:
    pinned = sys.argv[1]
    row("versions", lambda: versions(pinned))
    row("thinkgate imports", our_packages)
    row("processors through vLLM's loaders", processors)
    row("vLLM general plugins", plugins)
    row("replica's vLLM command (GPU), through vLLM's parser", replica_command)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
